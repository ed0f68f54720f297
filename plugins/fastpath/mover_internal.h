#pragma once

// What mover.cc and mover_copy.cc share (one Mover, its planning and orchestration in one file,
// its copies in the other): not for other users.

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "plugins/fastpath/driver.h"
#include "plugins/fastpath/result.h"

namespace cryo::fastpath::mover_internal {

using Clock = std::chrono::steady_clock;

inline int64_t Ms(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

// The failure of a driver call, and of a system call (errno).
inline Result Cuda(const Driver& d, const char* what, CUresult r) {
  return Result::Failed(std::string(what) + ": " + d.ErrorText(r) + " (" +
                        std::to_string(static_cast<int>(r)) + ")");
}

inline Result Errno(const std::string& what) {
  return Result::Failed(what + ": " + std::strerror(errno));
}

}  // namespace cryo::fastpath::mover_internal
