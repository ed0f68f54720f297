#pragma once

// Owned file descriptors: one closed when it goes out of scope, and a list closed at once.

#include <unistd.h>

#include <utility>
#include <vector>

namespace cryo {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// The descriptors of `fds`, lent (they stay owned there): for the calls that take a list of ints.
inline std::vector<int> Borrow(const std::vector<UniqueFd>& fds) {
  std::vector<int> out;
  out.reserve(fds.size());
  for (const UniqueFd& f : fds) out.push_back(f.get());
  return out;
}

// ... and of each list of `lists`.
inline std::vector<std::vector<int>> Borrow(const std::vector<std::vector<UniqueFd>>& lists) {
  std::vector<std::vector<int>> out;
  out.reserve(lists.size());
  for (const auto& fds : lists) out.push_back(Borrow(fds));
  return out;
}

// Closes every descriptor of `fds` and empties it.
inline void CloseAll(std::vector<int>& fds) {
  for (int f : fds) ::close(f);
  fds.clear();
}

}  // namespace cryo
