#pragma once

// The gate in front of the job's CUDA calls that submit GPU work or touch device memory. Open, a
// call costs two atomic operations. Shut (while the library moves device memory), a new call
// waits until the gate opens again and then runs as it would have; Shut() itself waits for the
// calls already inside to leave. The driver's own lock cannot do this for us: it also blocks the
// library's copies.
//
// A second, outer gate holds back the start of CUDA graph captures: a capture in progress must
// end (its launches need the main gate open) before the main gate shuts, and synchronizing a
// context would break it.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace cryo::fastpath {

class Gate {
 public:
  void Enter() {
    for (;;) {
      inside_.fetch_add(1, std::memory_order_seq_cst);
      if (!shut_.load(std::memory_order_seq_cst)) return;
      Leave();
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return !shut_.load(); });
    }
  }

  void Leave() {
    if (inside_.fetch_sub(1, std::memory_order_seq_cst) == 1 && shut_.load()) {
      std::lock_guard<std::mutex> l(mu_);
      cv_.notify_all();
    }
  }

  // Shuts the gate and waits until no call is inside. False (and the gate open again) when
  // calls are still inside after `timeout`.
  bool Shut(std::chrono::milliseconds timeout) {
    shut_.store(true, std::memory_order_seq_cst);
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, timeout, [&] { return inside_.load() == 0; })) {
      l.unlock();
      Open();
      return false;
    }
    return true;
  }

  void Open() {
    {
      std::lock_guard<std::mutex> l(mu_);
      shut_.store(false, std::memory_order_seq_cst);
    }
    cv_.notify_all();
  }

  bool shut() const { return shut_.load(); }
  int64_t inside() const { return inside_.load(); }

 private:
  std::atomic<bool> shut_{false};
  std::atomic<int64_t> inside_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

// Holds a gate for the length of one call. A call made from inside another (a driver that calls
// its own exported functions, which the library wraps) passes: the outer one holds the gate. The
// library's own threads never wait at the gate (MarkLibraryThread): they are the ones that open
// it.
class GateGuard {
 public:
  explicit GateGuard(Gate& g) : g_(g) {
    if (depth_++ == 0) g_.Enter();
  }
  ~GateGuard() {
    if (--depth_ == 0) g_.Leave();
  }
  GateGuard(const GateGuard&) = delete;
  GateGuard& operator=(const GateGuard&) = delete;

  static void MarkLibraryThread() { depth_ = 1; }

 private:
  Gate& g_;
  // Initial-exec: the library is preloaded, so its thread-locals sit in the static TLS block and
  // cost no __tls_get_addr call on every CUDA call.
  __attribute__((tls_model("initial-exec"))) static inline thread_local int depth_ = 0;
};

// Counts CUDA graph captures in progress, behind a gate of their own.
class CaptureGate {
 public:
  Gate& begin_gate() { return begin_; }
  void Began() {
    std::lock_guard<std::mutex> l(mu_);
    ++active_;
  }
  void Ended() {
    std::lock_guard<std::mutex> l(mu_);
    if (active_ > 0 && --active_ == 0) cv_.notify_all();
  }
  int active() {
    std::lock_guard<std::mutex> l(mu_);
    return active_;
  }

  // Holds back new captures and waits until none is in progress. False (and new captures
  // allowed again) when one is still going after `timeout`.
  bool Quiesce(std::chrono::milliseconds timeout) {
    if (!begin_.Shut(timeout)) return false;
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, timeout, [&] { return active_ == 0; })) {
      l.unlock();
      begin_.Open();
      return false;
    }
    return true;
  }
  void Release() { begin_.Open(); }

 private:
  Gate begin_;
  std::mutex mu_;
  std::condition_variable cv_;
  int active_ = 0;
};

}  // namespace cryo::fastpath
