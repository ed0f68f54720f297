#pragma once

// Parallel loops for cryod. EachInParallel: f(i) for every i in [0, n), each on a thread of its
// own (the calls block in drivers and in the jobs' fast path for seconds: processes move side by
// side). EachIndex: many small pieces of work shared by a few threads.

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

// The first failure among them, or OK.
inline absl::Status FirstError(const std::vector<absl::Status>& all) {
  for (const auto& s : all) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// one(i) for every i in [0, n) on at most `threads` threads (one at least), each taking the next
// i in turn. `worker()` runs once on each thread and returns that thread's `one`, with what it
// needs of its own (a buffer, a hash state). The first failure stops the others after their
// current call; a failure is returned if any call failed.
inline absl::Status EachIndexWith(
    size_t n, int threads, const std::function<std::function<absl::Status(size_t)>()>& worker) {
  std::atomic<size_t> next{0};
  const size_t k = std::min<size_t>(std::max(threads, 1), std::max<size_t>(1, n));
  return FirstError(EachInParallel(k, [&](size_t) -> absl::Status {
    if (next.load() >= n) return absl::OkStatus();
    const std::function<absl::Status(size_t)> one = worker();
    for (size_t i = next++; i < n; i = next++) {
      absl::Status st = one(i);
      if (!st.ok()) {
        next = n;
        return st;
      }
    }
    return absl::OkStatus();
  }));
}

// The same with one `one` for all threads.
inline absl::Status EachIndex(size_t n, int threads,
                              const std::function<absl::Status(size_t)>& one) {
  return EachIndexWith(n, threads, [&one] {
    return std::function<absl::Status(size_t)>([&one](size_t i) { return one(i); });
  });
}

// Lowers the calling thread's priority to `nice` (Linux: per thread; the threads it starts
// afterwards inherit it), for background copies beside work a job waits for. Best effort.
inline void NiceThisThread(int nice) {
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), nice);
}

}  // namespace cryo
