#pragma once

// A pipe that wakes a thread blocked in poll(): the thread polls read_fd() beside its socket,
// and the owner calls Wake() once to make it return (a server's destructor, before join).

#include <fcntl.h>
#include <unistd.h>

namespace cryo {

class WakePipe {
 public:
  WakePipe() {
    // Without the pipe poll() ignores the -1 and the thread only stops on its socket.
    if (::pipe2(fd_, O_CLOEXEC) != 0) fd_[0] = fd_[1] = -1;
  }
  ~WakePipe() {
    for (int f : fd_) {
      if (f >= 0) ::close(f);
    }
  }
  WakePipe(const WakePipe&) = delete;
  WakePipe& operator=(const WakePipe&) = delete;

  int read_fd() const { return fd_[0]; }
  void Wake() {
    if (fd_[1] < 0) return;
    char c = 0;
    ssize_t n = ::write(fd_[1], &c, 1);
    (void)n;
  }

 private:
  int fd_[2] = {-1, -1};
};

}  // namespace cryo
