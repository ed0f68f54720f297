#pragma once

// Whole reads and writes at an offset, for files that may be opened with O_DIRECT: partial
// transfers are finished, and direct I/O is dropped where the file system refuses it. Std only:
// the GPU fast-path library inside jobs uses it as well as cryod.

#include <errno.h>
#include <fcntl.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace cryo::io {

// EINVAL from a file opened with O_DIRECT: a file system or an offset it does not take. The
// file goes on without it (true), once.
inline bool DropDirectIo(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_DIRECT) != 0 && ::fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0;
}

inline std::string ErrnoText(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

inline bool WriteAll(int fd, std::vector<iovec> iov, off_t off, std::string* err) {
  size_t first = 0;
  while (first < iov.size()) {
    ssize_t n = ::pwritev(fd, iov.data() + first, static_cast<int>(iov.size() - first), off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && DropDirectIo(fd)) continue;
    if (n <= 0) {
      *err = n < 0 ? ErrnoText("write") : "write: no progress (store full?)";
      return false;
    }
    off += n;
    while (n > 0 && first < iov.size()) {
      size_t take = std::min<size_t>(n, iov[first].iov_len);
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
      iov[first].iov_len -= take;
      n -= take;
      if (iov[first].iov_len == 0) ++first;
    }
  }
  return true;
}

inline bool ReadAll(int fd, char* buf, size_t len, off_t off, std::string* err) {
  while (len > 0) {
    ssize_t n = ::pread(fd, buf, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && DropDirectIo(fd)) continue;
    if (n <= 0) {
      *err = n < 0 ? ErrnoText("read") : "file shorter than the drain wrote";
      return false;
    }
    buf += n;
    len -= n;
    off += n;
  }
  return true;
}

}  // namespace cryo::io
