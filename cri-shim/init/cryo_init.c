/*
 * cryo-init: PID 1 of a container that opted in to cryo.
 *
 *   cryo-init [--] COMMAND [ARG...]
 *
 * Starts COMMAND (the job) as its child in a session of its own, forwards every signal it gets
 * to the job, reaps every child that ends up with it, and exits with the job's exit code, or
 * 128+N when a signal N killed the job. The job has its own session so that CRIU can dump and
 * restore it without --shell-job.
 *
 * Restore mode: when CRYO_INIT_RESTORE_FROM names a checkpoint, cryo-init starts nothing. The
 * shim has cryod restore the job into this container (CRIU reparents it to us) and cryod then
 * queues CRYO_INIT_SIGNAL with the job's pid, or with 0 when the restore failed (the reason is
 * already in the container's log). From then on the restored job is supervised as if it had
 * been started here. See cryo_init_protocol.h.
 *
 * Exit codes of its own: 125 cryo-init failed or the restore failed, 126 COMMAND not
 * executable, 127 not found.
 *
 * Plain C and linked statically: it is bind-mounted into images that may have no libc at all.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/contract/cryo_init_protocol.h"

#define EXIT_INIT_FAILED 125
#define EXIT_NOT_EXECUTABLE 126
#define EXIT_NOT_FOUND 127

#define RESTORE_ENV CRYO_INIT_RESTORE_ENV

static void die(const char* what) {
  fprintf(stderr, "cryo-init: %s: %s\n", what, strerror(errno));
  exit(EXIT_INIT_FAILED);
}

/*
 * Signals cryo-init waits for rather than takes: everything except the ones the kernel raises
 * for faults in cryo-init itself, and the tty job-control stops, which must not stop PID 1.
 */
static void waited_signals(sigset_t* set) {
  sigfillset(set);
  static const int kSynchronous[] = {SIGFPE,  SIGILL, SIGSEGV, SIGBUS, SIGABRT,
                                     SIGTRAP, SIGSYS, SIGTTIN, SIGTTOU};
  for (size_t i = 0; i < sizeof(kSynchronous) / sizeof(kSynchronous[0]); i++) {
    sigdelset(set, kSynchronous[i]);
  }
}

/* The GPU fast-path library the shim mounted: first in the job's LD_PRELOAD (it must see the
 * job's dlsym calls first), before what the image's own LD_PRELOAD holds. */
static void preload_for_job(void) {
  const char* lib = getenv(CRYO_INIT_PRELOAD_ENV);
  if (lib == NULL || lib[0] == '\0') return;
  const char* old = getenv("LD_PRELOAD");
  size_t n = strlen(lib) + (old ? strlen(old) + 1 : 0) + 1;
  char* both = malloc(n);
  if (both != NULL) {
    if (old != NULL && old[0] != '\0') {
      snprintf(both, n, "%s:%s", lib, old);
    } else {
      snprintf(both, n, "%s", lib);
    }
    setenv("LD_PRELOAD", both, 1);
    free(both);
  }
  unsetenv(CRYO_INIT_PRELOAD_ENV);
}

/* Forks and execs the job in its own session; the child gets the original signal mask. */
static pid_t start_job(char** argv, const sigset_t* original_mask) {
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid > 0) return pid;

  if (sigprocmask(SIG_SETMASK, original_mask, NULL) != 0) {
    fprintf(stderr, "cryo-init: sigprocmask: %s\n", strerror(errno));
    _exit(EXIT_INIT_FAILED);
  }
  if (setsid() < 0) {
    fprintf(stderr, "cryo-init: setsid: %s\n", strerror(errno));
    _exit(EXIT_INIT_FAILED);
  }
  preload_for_job();
  execvp(argv[0], argv);
  int err = errno;
  fprintf(stderr, "cryo-init: cannot run %s: %s\n", argv[0], strerror(err));
  _exit(err == ENOENT || err == ENOTDIR ? EXIT_NOT_FOUND : EXIT_NOT_EXECUTABLE);
}

/* Children reaped before cryod named the job: the job may finish before the news arrives. */
#define MAX_EARLY 64
static pid_t early_pid[MAX_EARLY];
static int early_status[MAX_EARLY];
static int early_count;

static void remember_early(pid_t pid, int status) {
  if (early_count < MAX_EARLY) {
    early_pid[early_count] = pid;
    early_status[early_count] = status;
    early_count++;
  }
}

static void reap_early(void) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      remember_early(pid, status);
      continue;
    }
    if (pid == 0 || errno == ECHILD) return;
    if (errno != EINTR) die("waitpid");
  }
}

static int verbose(void) {
  const char* v = getenv(CRYO_INIT_VERBOSE_ENV);
  return v != NULL && strcmp(v, "1") == 0;
}

static int checkpointed_exit_code(void) {
  const char* v = getenv(CRYO_INIT_CHECKPOINTED_EXIT_ENV);
  long c = v ? strtol(v, NULL, 10) : 0;
  return c >= 1 && c <= CRYO_INIT_CHECKPOINTED_EXIT_MAX ? (int)c
                                                        : CRYO_INIT_CHECKPOINTED_EXIT_DEFAULT;
}

/* cryod's word at a stop: 1 for "checkpointed", 2 + the seconds of work lost for "no checkpoint,
 * the replacement resumes from an earlier one", 0 for anything else. */
static long stop_word(int value) {
  if (value == CRYO_INIT_VALUE_CHECKPOINTED) return 1;
  if ((value & ~CRYO_INIT_LOST_MAX_S) == CRYO_INIT_VALUE_RESUMES_EARLIER) {
    return 2 + (long)(value & CRYO_INIT_LOST_MAX_S);
  }
  return 0;
}

/* cryod queues its word before it kills the job, but when both are pending the kernel hands
 * out SIGCHLD (17) before the real-time signal: look for the word before naming the exit. */
static long checkpointed_word_pending(void) {
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, CRYO_INIT_SIGNAL);
  struct timespec now = {0, 0};
  siginfo_t info;
  long found = 0;
  while (sigtimedwait(&only, &info, &now) == CRYO_INIT_SIGNAL) {
    if (info.si_code == SI_QUEUE) {
      long w = stop_word(info.si_value.sival_int);
      if (w != 0) found = w;
    }
  }
  return found;
}

/* Kubernetes shows this as the container's termination message. Best effort. */
static void write_termination_message(const char* msg) {
  const char* path = getenv(CRYO_INIT_TERMINATION_LOG_ENV);
  if (path == NULL || path[0] == '\0') return;
  int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  ssize_t unused = write(fd, msg, strlen(msg));
  (void)unused;
  close(fd);
}

static long restore_timeout_s(void) {
  const char* v = getenv(CRYO_INIT_RESTORE_TIMEOUT_ENV);
  long t = v ? strtol(v, NULL, 10) : 0;
  return t > 0 ? t : CRYO_INIT_RESTORE_TIMEOUT_DEFAULT_S;
}

/*
 * Restore mode: waits for cryod's word. Returns the job's pid (our child now), or exits: the
 * restore failed, never came, or the container was stopped first. *early_exit is set when the
 * job already ended before we were told (its wait status in *early_status_out).
 */
static pid_t restore_job(const char* checkpoint, const sigset_t* waited, int* early_exit,
                         int* early_status_out) {
  long timeout = restore_timeout_s();
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += timeout;
  if (verbose())
    fprintf(stderr, "cryo-init: waiting for the restore of checkpoint %s\n", checkpoint);
  for (;;) {
    struct timespec now, left;
    clock_gettime(CLOCK_MONOTONIC, &now);
    left.tv_sec = deadline.tv_sec - now.tv_sec;
    left.tv_nsec = deadline.tv_nsec - now.tv_nsec;
    if (left.tv_nsec < 0) {
      left.tv_sec--;
      left.tv_nsec += 1000000000L;
    }
    if (left.tv_sec < 0) {
      fprintf(stderr, "cryo-init: no restore of checkpoint %s came within %ld s; giving up\n",
              checkpoint, timeout);
      exit(CRYO_INIT_EXIT_RESTORE_FAILED);
    }
    siginfo_t info;
    int sig = sigtimedwait(waited, &info, &left);
    if (sig < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      die("sigtimedwait");
    }
    if (sig == SIGCHLD) {
      reap_early();
      continue;
    }
    if (sig == CRYO_INIT_SIGNAL && info.si_code == SI_QUEUE) {
      pid_t job = info.si_value.sival_int;
      if (job <= 0) {
        fprintf(stderr, "cryo-init: the restore of checkpoint %s failed\n", checkpoint);
        exit(CRYO_INIT_EXIT_RESTORE_FAILED);
      }
      reap_early();
      for (int i = 0; i < early_count; i++) {
        if (early_pid[i] == job) {
          *early_exit = 1;
          *early_status_out = early_status[i];
        }
      }
      return job;
    }
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT) {
      /* Stopped before the job came back: nothing to hand the signal to. */
      exit(128 + sig);
    }
  }
}

/* Encodes a wait status the way shells and kubelet expect. */
static int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return EXIT_INIT_FAILED;
}

/* Reaps every exited child; returns 1 and sets *job_status once the job itself is reaped. */
static int reap(pid_t job, int* job_status) {
  int job_done = 0;
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      if (pid == job) {
        *job_status = status;
        job_done = 1;
      }
      continue;
    }
    if (pid == 0 || errno == ECHILD) return job_done;
    if (errno != EINTR) die("waitpid");
  }
}

/* Waits for signals until the job is gone; returns its exit code, or the checkpointed exit code
 * when cryod said it checkpointed the job before ending it. */
static int supervise(pid_t job, const sigset_t* waited) {
  int status = 0;
  long checkpointed = 0; /* stop_word() of cryod's word, once it came */
  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(waited, &info);
    if (sig < 0) {
      if (errno == EINTR) continue;
      die("sigwaitinfo");
    }
    if (sig == SIGCHLD) {
      if (!reap(job, &status)) continue;
      long pending = checkpointed ? 0 : checkpointed_word_pending();
      if (pending != 0) checkpointed = pending;
      if (checkpointed == 1) {
        int code = checkpointed_exit_code();
        write_termination_message(
            "cryo: checkpointed before this stop; its replacement resumes from the checkpoint\n");
        if (verbose()) fprintf(stderr, "cryo-init: job checkpointed and stopped (exit %d)\n", code);
        return code;
      }
      if (checkpointed >= 2) {
        char msg[320];
        snprintf(msg, sizeof(msg),
                 "cryo: not checkpointed at this stop: a checkpoint would not have finished "
                 "within the grace period; its replacement resumes from the newest periodic "
                 "checkpoint, taken %ld s before the stop (that work is lost)\n",
                 checkpointed - 2);
        write_termination_message(msg);
        return checkpointed_exit_code();
      }
      return exit_code_of(status);
    }
    if (sig == CRYO_INIT_SIGNAL && info.si_code == SI_QUEUE &&
        stop_word(info.si_value.sival_int) != 0) {
      checkpointed = stop_word(info.si_value.sival_int); /* cryod's word: not forwarded */
      continue;
    }
    /* Forward to the job only; it decides what its children get (kubelet's stop is a TERM to
     * PID 1, then a KILL of the whole container). */
    if (kill(job, sig) != 0 && errno != ESRCH) {
      fprintf(stderr, "cryo-init: forwarding signal %d: %s\n", sig, strerror(errno));
    }
  }
}

int main(int argc, char** argv) {
  int first = 1;
  if (first < argc && strcmp(argv[first], "--") == 0) first++;
  const char* restore_from = getenv(RESTORE_ENV);
  int restoring = restore_from != NULL && restore_from[0] != '\0';
  if (!restoring && first >= argc) {
    fprintf(stderr, "usage: cryo-init [--] COMMAND [ARG...]\n");
    return EXIT_INIT_FAILED;
  }

  /* Orphans of the job must come to us even when we are not PID 1 (tests, nested inits). */
  if (getpid() != 1 && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    die("prctl(PR_SET_CHILD_SUBREAPER)");
  }

  sigset_t waited, original;
  waited_signals(&waited);
  if (sigprocmask(SIG_BLOCK, &waited, &original) != 0) die("sigprocmask");

  pid_t job;
  if (restoring) {
    int early_exit = 0, early_status = 0;
    job = restore_job(restore_from, &waited, &early_exit, &early_status);
    if (early_exit) return exit_code_of(early_status);
  } else {
    job = start_job(argv + first, &original);
  }
  return supervise(job, &waited);
}
