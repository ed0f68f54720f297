// Two members of one job that keep a running sum over TCP both ways (issue 37's workload): each
// side sends its step number, reads the peer's, and adds it to its sum. Both step together, so
// at step n each has received 1..n exactly once and its sum is n(n+1)/2; a byte lost,
// duplicated or reordered by a checkpoint and restore shows as a wrong value, and the side that
// sees it writes ok 0 and stops.
//
//   cryo-sumpair --status FILE --listen [ADDR:]PORT [--redial FILE]   (waits for the peer there)
//   cryo-sumpair --status FILE --connect [ADDR:]PORT [--redial FILE]
//
// ADDR is an IPv4 address, 127.0.0.1 when left out (two pods: the listener on 0.0.0.0, the
// other connecting to its pod's address).
//
// --redial: as a job that dials its peers again by the addresses it remembers (a launcher's
// store, NCCL's new connections): the listener keeps listening and echoes whatever a new
// connection sends; the other, each time the file FILE appears, opens a new connection to the
// address it was given at its start, exchanges one value, closes it and removes FILE.
//
// The status file holds one fixed-size record at offset 0: {"main": n, "sum": s, "ok": 1|0,
// "redials": r, "redial_errno": e} (CRIU restores a regular file only at the size it had when
// checkpointed).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int Exact(int fd, void* buf, size_t n, int reading) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = reading ? read(fd, (char*)buf + done, n - done)
                        : write(fd, (const char*)buf + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    done += (size_t)r;
  }
  return 0;
}

static int redials, redial_errno;

static void Record(int status, unsigned long long n, unsigned long long sum, int ok) {
  char rec[128];
  memset(rec, ' ', sizeof(rec));
  rec[sizeof(rec) - 1] = '\n';
  int len = snprintf(rec, sizeof(rec) - 1,
                     "{\"main\": %llu, \"sum\": %llu, \"ok\": %d, \"redials\": %d, "
                     "\"redial_errno\": %d}",
                     n, sum, ok, redials, redial_errno);
  if (len > 0 && len < (int)sizeof(rec) - 1) rec[len] = ' ';
  if (pwrite(status, rec, sizeof(rec), 0) != (ssize_t)sizeof(rec)) exit(1);
}

// The listener's side of --redial: every new connection gets back what it sends.
static void* Echo(void* arg) {
  int l = (int)(long)arg;
  for (;;) {
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue;
    unsigned long long v;
    if (Exact(c, &v, sizeof(v), 1) == 0) Exact(c, &v, sizeof(v), 0);
    close(c);
  }
  return NULL;
}

// The other side's: 0 or the errno of what failed (a value that came back wrong: EBADMSG).
static int Redial(const struct sockaddr_in* addr, unsigned long long v) {
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c < 0) return errno;
  struct timeval tv = {10, 0};
  setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int err = 0;
  unsigned long long back = 0;
  if (connect(c, (const struct sockaddr*)addr, sizeof(*addr)) != 0) {
    err = errno;
  } else if (Exact(c, &v, sizeof(v), 0) != 0 || Exact(c, &back, sizeof(back), 1) != 0) {
    err = errno ? errno : EPIPE;
  } else if (back != v) {
    err = EBADMSG;
  }
  close(c);
  return err;
}

int main(int argc, char** argv) {
  const char* status_path = NULL;
  const char* where = NULL;
  const char* redial = NULL;
  int listen_side = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--status")) status_path = argv[i + 1];
    if (!strcmp(argv[i], "--listen")) where = argv[i + 1], listen_side = 1;
    if (!strcmp(argv[i], "--connect")) where = argv[i + 1], listen_side = 0;
    if (!strcmp(argv[i], "--redial")) redial = argv[i + 1];
  }
  if (!status_path || !where || listen_side < 0) return 2;
  char host[64] = "127.0.0.1";
  const char* colon = strrchr(where, ':');
  if (colon) {
    if ((size_t)(colon - where) >= sizeof(host)) return 2;
    memcpy(host, where, (size_t)(colon - where));
    host[colon - where] = 0;
  }
  const int port = atoi(colon ? colon + 1 : where);
  if (port <= 0 || port > 65535) return 2;
  int status = open(status_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (status < 0) return 1;
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
  if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) return 2;
  int s = -1;
  if (listen_side) {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(l, (struct sockaddr*)&addr, sizeof(addr)) != 0 || listen(l, 1) != 0) return 1;
    s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    pthread_t echo;
    if (redial) {
      if (pthread_create(&echo, NULL, Echo, (void*)(long)l) != 0) return 1;
    } else {
      close(l);  // nothing listens any more: the job is its one connection
    }
  } else {
    for (int tries = 0; tries < 600 && s < 0; ++tries) {
      s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (connect(s, (struct sockaddr*)&addr, sizeof(addr)) != 0) {
        close(s);
        s = -1;
        usleep(50 * 1000);
      }
    }
  }
  if (s < 0) return 1;
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  unsigned long long sum = 0;
  Record(status, 0, 0, 1);
  for (unsigned long long n = 1;; ++n) {
    unsigned long long got = 0;
    if (Exact(s, &n, sizeof(n), 0) != 0 || Exact(s, &got, sizeof(got), 1) != 0) {
      Record(status, n - 1, sum, 0);
      return 3;
    }
    sum += got;
    if (got != n || sum != n * (n + 1) / 2) {
      Record(status, n, sum, 0);
      return 4;
    }
    if (redial && !listen_side && access(redial, F_OK) == 0) {
      const int err = Redial(&addr, n);
      if (err == 0) ++redials;
      redial_errno = err;
      unlink(redial);
    }
    Record(status, n, sum, 1);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}
