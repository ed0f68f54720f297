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
 * Restore mode (hook only, not implemented): when CRYO_INIT_RESTORE_FROM names a checkpoint,
 * cryo-init will ask cryod to restore the job into this container instead of starting COMMAND;
 * see restore_job().
 *
 * Exit codes of its own: 125 cryo-init failed, 126 COMMAND not executable, 127 not found.
 *
 * Plain C and linked statically: it is bind-mounted into images that may have no libc at all.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_INIT_FAILED 125
#define EXIT_NOT_EXECUTABLE 126
#define EXIT_NOT_FOUND 127

/* Environment variable that switches cryo-init to restore mode (value: checkpoint id). */
#define RESTORE_ENV "CRYO_INIT_RESTORE_FROM"

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
  execvp(argv[0], argv);
  int err = errno;
  fprintf(stderr, "cryo-init: cannot run %s: %s\n", argv[0], strerror(err));
  _exit(err == ENOENT || err == ENOTDIR ? EXIT_NOT_FOUND : EXIT_NOT_EXECUTABLE);
}

/*
 * Restore mode hook. To come: connect to cryod (its socket is mounted into the container), ask
 * it to restore `checkpoint` into this container's namespaces and cgroup with our fd 1/2 as
 * the job's stdout/stderr, and return the pid of the restored job, which CRIU reparents to us.
 * Only that pid counts as the job: a failed restore can leave a CRIU helper child behind, which
 * is reaped like any other orphan. Until then: not implemented.
 */
static pid_t restore_job(const char* checkpoint) {
  (void)checkpoint;
  errno = ENOSYS;
  return -1;
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

/* Waits for signals until the job is gone; returns its exit code. */
static int supervise(pid_t job, const sigset_t* waited) {
  int status = 0;
  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(waited, &info);
    if (sig < 0) {
      if (errno == EINTR) continue;
      die("sigwaitinfo");
    }
    if (sig == SIGCHLD) {
      if (reap(job, &status)) return exit_code_of(status);
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
    job = restore_job(restore_from);
    if (job < 0) {
      fprintf(stderr, "cryo-init: restoring checkpoint %s: %s\n", restore_from,
              errno == ENOSYS ? "restore mode is not implemented yet" : strerror(errno));
      return EXIT_INIT_FAILED;
    }
  } else {
    job = start_job(argv + first, &original);
  }
  return supervise(job, &waited);
}
