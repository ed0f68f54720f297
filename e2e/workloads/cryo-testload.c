// cryo-testload: a job whose state shows whether a checkpoint/restore kept it intact.
//
// It holds --mem-mib of memory filled with a pattern derived from a random nonce, runs
// --threads counting threads, and forks a child that shares an anonymous MAP_SHARED counter,
// streams its own counter through a pipe and echoes pings over a unix socketpair. It keeps a
// deleted temporary file open and checks its contents. Every --interval-ms it rewrites one
// JSON record at offset 0 of the --status file (held open across the checkpoint). SIGUSR1
// makes it verify the whole memory pattern; the record says when and whether it matched.
// SIGTERM ends it with exit code 0; --exit-code N makes it exit N after --exit-after ticks.
// --tcp adds an established loopback TCP connection between parent and child that carries
// pings too (for CRIU's --tcp-established). --seccomp installs a seccomp filter (with
// no_new_privs) before anything starts, so every thread of the tree shares it, as a pod's job under
// a runtime's profile does. --ticks prints "tick N" (the main counter) to stdout every round, for
// a container's log.

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RECORD 1024
#define MAX_THREADS 64

static uint64_t nonce;
static uint64_t* mem;
static size_t mem_words;
static int interval_ms = 10;
static atomic_uint_fast64_t thread_counters[MAX_THREADS];
static volatile sig_atomic_t verify_requested, stop_requested;

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void* counter_thread(void* arg) {
  atomic_uint_fast64_t* c = arg;
  for (;;) {
    atomic_fetch_add(c, 1);
    sleep_ms(interval_ms);
  }
  return NULL;
}

static void on_usr1(int sig) {
  (void)sig;
  verify_requested = 1;
}
static void on_term(int sig) {
  (void)sig;
  stop_requested = 1;
}

// Allows every system call but acct(2), which answers EPERM: a filter that changes nothing the
// job does, and that CRIU must carry.
static int install_seccomp(void) {
  struct sock_filter prog[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_acct, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog fprog = {.len = sizeof(prog) / sizeof(prog[0]), .filter = prog};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0);
}

static int verify_memory(void) {
  for (size_t i = 0; i < mem_words; i++) {
    if (mem[i] != mix(nonce ^ i)) return 0;
  }
  return 1;
}

static void child_main(int pipe_w, int sock, int tcp, volatile uint64_t* shm, pid_t parent) {
  uint64_t own = 0;
  for (;;) {
    if (getppid() != parent) _exit(0);
    own++;
    __atomic_add_fetch(shm, 1, __ATOMIC_SEQ_CST);
    if (write(pipe_w, &own, sizeof(own)) < 0 && errno != EAGAIN) _exit(3);
    char buf[16];
    ssize_t n = recv(sock, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) send(sock, buf, n, 0);
    if (tcp >= 0) {
      n = recv(tcp, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0)
        send(tcp, buf, n, 0);
      else if (n == 0)
        _exit(4);  // the connection broke
    }
    sleep_ms(interval_ms);
  }
}

int main(int argc, char** argv) {
  long mem_mib = 16;
  int nthreads = 4;
  const char* status_path = NULL;
  long exit_after = -1;
  int exit_code = 0;
  int use_tcp = 0, use_seccomp = 0, ticks = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mem-mib") && i + 1 < argc)
      mem_mib = atol(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      nthreads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--status") && i + 1 < argc)
      status_path = argv[++i];
    else if (!strcmp(argv[i], "--interval-ms") && i + 1 < argc)
      interval_ms = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--exit-after") && i + 1 < argc)
      exit_after = atol(argv[++i]);
    else if (!strcmp(argv[i], "--exit-code") && i + 1 < argc)
      exit_code = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tcp"))
      use_tcp = 1;
    else if (!strcmp(argv[i], "--seccomp"))
      use_seccomp = 1;
    else if (!strcmp(argv[i], "--ticks"))
      ticks = 1;
    else {
      fprintf(stderr,
              "usage: %s --status FILE [--mem-mib N] [--threads N] [--interval-ms N] "
              "[--exit-after TICKS --exit-code N] [--tcp] [--seccomp] [--ticks]\n",
              argv[0]);
      return 2;
    }
  }
  if (!status_path || nthreads < 0 || nthreads > MAX_THREADS || mem_mib < 0) {
    fprintf(stderr, "%s: --status is required; threads 0..%d\n", argv[0], MAX_THREADS);
    return 2;
  }
  // Before the fork and the threads: the whole tree runs under it.
  if (use_seccomp && install_seccomp() != 0) {
    perror("seccomp");
    return 1;
  }
  int urnd = open("/dev/urandom", O_RDONLY);
  if (urnd < 0 || read(urnd, &nonce, sizeof(nonce)) != sizeof(nonce)) return 1;
  close(urnd);

  mem_words = (size_t)mem_mib * 1024 * 1024 / sizeof(uint64_t);
  if (mem_words) {
    mem = mmap(NULL, mem_words * sizeof(uint64_t), PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      perror("mmap");
      return 1;
    }
    for (size_t i = 0; i < mem_words; i++) mem[i] = mix(nonce ^ i);
  }

  volatile uint64_t* shm =
      mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shm == MAP_FAILED) {
    perror("mmap shared");
    return 1;
  }

  // A deleted file the job keeps open: CRIU must carry its contents.
  char tmpl[] = "/tmp/cryo-testload-XXXXXX";
  int del = mkstemp(tmpl);
  if (del < 0) {
    perror("mkstemp");
    return 1;
  }
  unlink(tmpl);
  uint64_t del_content[512];
  for (int i = 0; i < 512; i++) del_content[i] = mix(nonce + 7 * i);
  if (pwrite(del, del_content, sizeof(del_content), 0) != sizeof(del_content)) return 1;

  int status = open(status_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (status < 0) {
    perror(status_path);
    return 1;
  }

  int pfd[2], sv[2];
  if (pipe2(pfd, O_NONBLOCK) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  // Parent listens on an ephemeral loopback port; the child connects after the fork.
  int lsock = -1, tcp_parent = -1, tcp_child = -1;
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (use_tcp) {
    socklen_t alen = sizeof(addr);
    lsock = socket(AF_INET, SOCK_STREAM, 0);
    if (lsock < 0 || bind(lsock, (struct sockaddr*)&addr, sizeof(addr)) != 0 ||
        listen(lsock, 1) != 0 || getsockname(lsock, (struct sockaddr*)&addr, &alen) != 0) {
      perror("tcp listen");
      return 1;
    }
  }
  pid_t parent = getpid();
  pid_t child = fork();
  if (child < 0) {
    perror("fork");
    return 1;
  }
  if (child == 0) {
    // The child has its own small state; the big pattern belongs to the parent only.
    if (mem_words) munmap(mem, mem_words * sizeof(uint64_t));
    close(pfd[0]);
    close(sv[0]);
    if (use_tcp) {
      close(lsock);
      tcp_child = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(tcp_child, (struct sockaddr*)&addr, sizeof(addr)) != 0) _exit(5);
    }
    child_main(pfd[1], sv[1], tcp_child, shm, parent);
  }
  close(pfd[1]);
  close(sv[1]);
  if (use_tcp) {
    tcp_parent = accept(lsock, NULL, NULL);
    close(lsock);  // only the established connection remains
    if (tcp_parent < 0) {
      perror("accept");
      return 1;
    }
  }

  signal(SIGUSR1, on_usr1);
  signal(SIGTERM, on_term);
  if (ticks) setvbuf(stdout, NULL, _IOLBF, 0);
  pthread_t th[MAX_THREADS];
  for (int i = 0; i < nthreads; i++)
    pthread_create(&th[i], NULL, counter_thread, &thread_counters[i]);

  uint64_t main_counter = 0, child_last = 0, pipe_msgs = 0, echoes = 0, verify_seq = 0;
  uint64_t tcp_echoes = 0;
  int verify_ok = -1;
  char rec[RECORD];
  for (;;) {
    if (stop_requested) break;
    main_counter++;
    uint64_t v;
    while (read(pfd[0], &v, sizeof(v)) == sizeof(v)) {
      // The child's counter must only ever go up by one per message: a lost or replayed
      // pipe buffer would show here.
      if (child_last != 0 && v != child_last + 1) verify_ok = 0;
      child_last = v;
      pipe_msgs++;
    }
    char ping[8] = "ping";
    send(sv[0], ping, 4, MSG_DONTWAIT);
    char echo[16];
    if (recv(sv[0], echo, sizeof(echo), MSG_DONTWAIT) > 0) echoes++;
    if (tcp_parent >= 0) {
      send(tcp_parent, "tcp!", 4, MSG_DONTWAIT);
      ssize_t r = recv(tcp_parent, echo, sizeof(echo), MSG_DONTWAIT);
      if (r > 0)
        tcp_echoes++;
      else if (r == 0)
        verify_ok = 0;  // peer closed: the connection did not survive
    }
    if (verify_requested) {
      verify_requested = 0;
      uint64_t check[512];
      int ok = verify_memory() && pread(del, check, sizeof(check), 0) == sizeof(check) &&
               memcmp(check, del_content, sizeof(check)) == 0;
      if (verify_ok != 0) verify_ok = ok;
      verify_seq++;
    }
    int n = snprintf(rec, sizeof(rec),
                     "{\"pid\": %d, \"nonce\": \"%016" PRIx64 "\", \"main\": %" PRIu64
                     ", \"child_pid\": %d, \"child\": %" PRIu64 ", \"shm\": %" PRIu64
                     ", \"pipe_msgs\": %" PRIu64 ", \"echoes\": %" PRIu64
                     ", \"tcp_echoes\": %" PRIu64 ", \"verify_seq\": %" PRIu64
                     ", \"verify_ok\": %d, \"mem_mib\": %ld, \"threads\": [",
                     getpid(), nonce, main_counter, child, child_last, *shm, pipe_msgs, echoes,
                     tcp_echoes, verify_seq, verify_ok, mem_mib);
    for (int i = 0; i < nthreads && n < RECORD - 64; i++) {
      n += snprintf(rec + n, sizeof(rec) - n, "%s%" PRIu64, i ? ", " : "",
                    (uint64_t)atomic_load(&thread_counters[i]));
    }
    n += snprintf(rec + n, sizeof(rec) - n, "]}");
    memset(rec + n, ' ', RECORD - 1 - n);
    rec[RECORD - 1] = '\n';
    if (pwrite(status, rec, RECORD, 0) != RECORD) return 1;
    if (ticks) printf("tick %" PRIu64 "\n", main_counter);
    if (exit_after >= 0 && (long)main_counter >= exit_after) {
      kill(child, SIGKILL);
      waitpid(child, NULL, 0);
      return exit_code;
    }
    sleep_ms(interval_ms);
  }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  return 0;
}
