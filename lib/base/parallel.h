#pragma once

// One parallel-for for cryod: f(i) for every i in [0, n), each on a thread of its own (the
// calls block in drivers and in the jobs' fast path for seconds: processes move side by side).

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace cryo {

// Every call's status, in order; joined before it returns.
inline std::vector<absl::Status> EachInParallel(size_t n,
                                                const std::function<absl::Status(size_t)>& f) {
  std::vector<absl::Status> out(n);
  if (n == 1) {
    out[0] = f(0);
    return out;
  }
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) threads.emplace_back([&, i] { out[i] = f(i); });
  for (std::thread& t : threads) t.join();
  return out;
}

// Lowers the calling thread's priority to `nice` (Linux: per thread; the threads it starts
// afterwards inherit it), for background copies beside work a job waits for. Best effort.
inline void NiceThisThread(int nice) {
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), nice);
}

// The first failure among them, or OK.
inline absl::Status FirstError(const std::vector<absl::Status>& all) {
  for (const auto& s : all) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace cryo
