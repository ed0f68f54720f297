// cryo-edgeload: a job holding the process state CRIU keeps only when asked (each mode one kind),
// for the tests of cryo's CRIU options. Every --interval-ms it rewrites one JSON record at offset
// 0 of the --status file: {"main": ticks, "ok": 1|0, "tcp": "open"|"closed"|"none",
// "sent": datagrams, "accepted": connections}. "ok" turns 0 for good when what the mode holds is
// no longer intact.
//
//   --deleted-mib N     a deleted file of N MiB kept open, its contents checked every tick
//   --linked-unlinked D an open file whose name D/a was unlinked while D/b still links it
//   --unix-dgram PATH   a datagram socket connected to PATH (outside the job), one datagram a tick
//   --listen-port-file F  a listener on a loopback port (written to F) that never accepts
//   --tcp-connect PORT  a TCP connection to 127.0.0.1:PORT, one message a tick
//   --accept-port-file F  a listener on a loopback port (written to F) without SO_REUSEADDR, as
//                       NCCL's bootstrap makes them, that accepts and closes connections every
//                       tick; at start it accepts one from itself and closes its end first, which
//                       leaves a TIME_WAIT socket on its port for 60 s
//   --io-uring          an io_uring instance with its submission ring mapped, as libuv's loop
//                       holds one (PyTorch's TCPStore); CRIU cannot checkpoint it. Exits 77
//                       when the kernel refuses io_uring_setup
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Fills `fd` with `pages` pages of the pattern of `seed`.
static int fill(int fd, size_t pages, uint64_t seed) {
  uint64_t buf[PAGE / 8];
  for (size_t p = 0; p < pages; p++) {
    for (size_t i = 0; i < PAGE / 8; i++) buf[i] = mix(seed ^ (p * (PAGE / 8) + i));
    if (pwrite(fd, buf, PAGE, (off_t)(p * PAGE)) != PAGE) return -1;
  }
  return 0;
}

// Checks the first and last page: enough to tell an empty, truncated or foreign file.
static int check(int fd, size_t pages, uint64_t seed) {
  uint64_t buf[PAGE / 8];
  size_t probe[2] = {0, pages - 1};
  for (int k = 0; k < 2; k++) {
    size_t p = probe[k];
    if (pread(fd, buf, PAGE, (off_t)(p * PAGE)) != PAGE) return 0;
    for (size_t i = 0; i < PAGE / 8; i++) {
      if (buf[i] != mix(seed ^ (p * (PAGE / 8) + i))) return 0;
    }
  }
  return 1;
}

int main(int argc, char** argv) {
  const char *status_path = NULL, *linked_dir = NULL, *dgram_path = NULL, *port_file = NULL,
             *accept_file = NULL;
  long deleted_mib = 0, tcp_port = 0;
  int interval_ms = 10, io_uring = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--status") && i + 1 < argc) {
      status_path = argv[++i];
    } else if (!strcmp(argv[i], "--deleted-mib") && i + 1 < argc) {
      deleted_mib = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--linked-unlinked") && i + 1 < argc) {
      linked_dir = argv[++i];
    } else if (!strcmp(argv[i], "--unix-dgram") && i + 1 < argc) {
      dgram_path = argv[++i];
    } else if (!strcmp(argv[i], "--listen-port-file") && i + 1 < argc) {
      port_file = argv[++i];
    } else if (!strcmp(argv[i], "--accept-port-file") && i + 1 < argc) {
      accept_file = argv[++i];
    } else if (!strcmp(argv[i], "--tcp-connect") && i + 1 < argc) {
      tcp_port = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--io-uring")) {
      io_uring = 1;
    } else if (!strcmp(argv[i], "--interval-ms") && i + 1 < argc) {
      interval_ms = atoi(argv[++i]);
    } else {
      fprintf(stderr, "%s: unknown argument %s\n", argv[0], argv[i]);
      return 2;
    }
  }
  if (!status_path) return 2;
  const uint64_t seed = (uint64_t)getpid() * 7919u + (uint64_t)time(NULL);
  int deleted = -1, linked = -1, dgram = -1, listener = -1, tcp = -1;
  size_t deleted_pages = (size_t)deleted_mib * 256;
  if (deleted_mib > 0) {
    char tmpl[] = "/tmp/cryo-edgeload-XXXXXX";
    deleted = mkstemp(tmpl);
    if (deleted < 0 || unlink(tmpl) != 0 || fill(deleted, deleted_pages, seed) != 0) return 1;
  }
  if (linked_dir) {
    char a[4096], b[4096];
    snprintf(a, sizeof(a), "%s/a", linked_dir);
    snprintf(b, sizeof(b), "%s/b", linked_dir);
    linked = open(a, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (linked < 0 || fill(linked, 1, seed + 1) != 0 || link(a, b) != 0 || unlink(a) != 0) {
      return 1;
    }
  }
  if (dgram_path) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strncpy(sa.sun_path, dgram_path, sizeof(sa.sun_path) - 1);
    dgram = socket(AF_UNIX, SOCK_DGRAM, 0);
    if (dgram < 0 || connect(dgram, (struct sockaddr*)&sa, sizeof(sa)) != 0) return 1;
  }
  if (port_file || accept_file) {
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0 || bind(listener, (struct sockaddr*)&sa, sizeof(sa)) != 0 ||
        listen(listener, 8) != 0 || getsockname(listener, (struct sockaddr*)&sa, &len) != 0) {
      return 1;
    }
    if (accept_file) {
      // The accepted end closes first: the TIME_WAIT socket is on the listener's port.
      int c = socket(AF_INET, SOCK_STREAM, 0);
      if (c < 0 || connect(c, (struct sockaddr*)&sa, sizeof(sa)) != 0) return 1;
      int a = accept(listener, NULL, NULL);
      char b;
      if (a < 0 || close(a) != 0 || read(c, &b, 1) != 0) return 1;
      close(c);
      fcntl(listener, F_SETFL, O_NONBLOCK);
    }
    FILE* f = fopen(port_file ? port_file : accept_file, "w");
    if (!f) return 1;
    fprintf(f, "%d\n", ntohs(sa.sin_port));
    fclose(f);
  }
  if (tcp_port > 0) {
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)tcp_port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    tcp = socket(AF_INET, SOCK_STREAM, 0);
    if (tcp < 0 || connect(tcp, (struct sockaddr*)&sa, sizeof(sa)) != 0) return 1;
  }
  if (io_uring) {
    // struct io_uring_params is 120 bytes; only sq_entries (out) and the ring offsets matter
    // here, and the ring is mapped at IORING_OFF_SQ_RING (0) with one page, as a loop does.
    uint32_t params[30] = {0};
    long fd = syscall(__NR_io_uring_setup, 4, params);
    if (fd < 0) {
      fprintf(stderr, "io_uring_setup: %s\n", strerror(errno));
      return 77;
    }
    if (mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, (int)fd, 0) ==
        MAP_FAILED) {
      fprintf(stderr, "mmap io_uring: %s\n", strerror(errno));
      return 77;
    }
  }
  int status = open(status_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (status < 0) return 1;
  uint64_t ticks = 0, sent = 0, accepted = 0;
  int ok = 1, tcp_open = tcp >= 0;
  for (;;) {
    ticks++;
    if (deleted >= 0 && !check(deleted, deleted_pages, seed)) ok = 0;
    if (linked >= 0 && !check(linked, 1, seed + 1)) ok = 0;
    if (dgram >= 0) {
      char msg[64];
      int n = snprintf(msg, sizeof(msg), "tick %" PRIu64, ticks);
      if (send(dgram, msg, (size_t)n, MSG_DONTWAIT) == n) sent++;
    }
    if (tcp >= 0 && tcp_open) {
      if (send(tcp, "tick", 4, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN) tcp_open = 0;
      char buf[64];
      ssize_t r = recv(tcp, buf, sizeof(buf), MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) tcp_open = 0;
    }
    if (accept_file) {
      for (int a; (a = accept(listener, NULL, NULL)) >= 0; close(a)) accepted++;
    }
    char rec[256];
    int n = snprintf(rec, sizeof(rec),
                     "{\"main\": %" PRIu64 ", \"ok\": %d, \"tcp\": \"%s\", \"sent\": %" PRIu64
                     ", \"accepted\": %" PRIu64 "}",
                     ticks, ok, tcp < 0 ? "none" : (tcp_open ? "open" : "closed"), sent, accepted);
    memset(rec + n, ' ', sizeof(rec) - (size_t)n - 1);
    rec[sizeof(rec) - 1] = '\n';
    if (pwrite(status, rec, sizeof(rec), 0) != (ssize_t)sizeof(rec)) return 1;
    struct timespec ts = {interval_ms / 1000, (long)(interval_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
}
