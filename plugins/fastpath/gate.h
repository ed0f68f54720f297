#pragma once

// The gate in front of the job's CUDA calls that submit GPU work or touch device memory. Open, a
// call costs one locked store to a line of the calling thread's own. Shut (while the library moves
// device memory), a new call waits until the gate opens again and then runs as it would have;
// Shut() itself waits for the calls already inside to leave. The driver's own lock cannot do this
// for us: it also blocks the library's copies.
//
// A second, outer gate holds back the start of CUDA graph captures: a capture in progress must
// end (its launches need the main gate open) before the main gate shuts, and synchronizing a
// context would break it.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace cryo::fastpath {

class Gate {
 public:
  Gate() : id_(next_id_.fetch_add(1) + 1) {}
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  void Enter() {
    Slot* me = MySlot();
    for (;;) {
      // Dekker with Shut(): either this call sees the gate shut, or Shut() sees it inside.
      me->inside.store(1, std::memory_order_seq_cst);
      if (!shut_.load(std::memory_order_seq_cst)) return;
      me->inside.store(0, std::memory_order_seq_cst);
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return !shut_.load(); });
    }
  }

  // No locked instruction and no line shared with other threads: Shut() polls.
  void Leave() { MySlot()->inside.store(0, std::memory_order_release); }

  // Shuts the gate and waits until no call is inside. False (and the gate open again) when
  // calls are still inside after `timeout`.
  bool Shut(std::chrono::milliseconds timeout) {
    shut_.store(true, std::memory_order_seq_cst);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (inside() > 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        Open();
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
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
  // Threads inside now.
  int64_t inside() {
    std::lock_guard<std::mutex> l(slots_mu_);
    int64_t n = 0;
    for (const auto& s : slots_) n += s->inside.load(std::memory_order_seq_cst);
    return n;
  }

 private:
  // One per thread that ever called through this gate, on a cache line of its own; kept for
  // the process's life (a thread's slot is reused by no other thread: threads are few).
  struct alignas(64) Slot {
    std::atomic<int> inside{0};
  };

  Slot* MySlot() {
    // A thread passes one gate or two (the capture gate): a two-entry cache, no lock.
    // By id, not address: a gate made where an old one was is another gate.
    struct Cached {
      uint64_t gate;
      Slot* slot;
    };
    __attribute__((tls_model("initial-exec"))) static thread_local Cached cache[2];
    if (cache[0].gate == id_) return cache[0].slot;
    if (cache[1].gate == id_) return cache[1].slot;
    auto slot = std::make_unique<Slot>();
    Slot* raw = slot.get();
    {
      std::lock_guard<std::mutex> l(slots_mu_);
      slots_.push_back(std::move(slot));
    }
    cache[1] = cache[0];
    cache[0] = {id_, raw};
    return raw;
  }

  static inline std::atomic<uint64_t> next_id_{0};
  const uint64_t id_;
  std::atomic<bool> shut_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::mutex slots_mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
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

// Counts the job's launches of NCCL kernels (one per collective, or per group of them, on every
// rank alike) and can hold a launch back once a count is reached, so that the cut across ranks
// stops every rank after the same collective (docs/gpu.md, "The cut across ranks"). A launch is
// counted inside the main gate, just before it is made (one that waits at the main gate has not
// been made, and is not counted); one held at the limit waits outside the main gate, so that it
// never keeps the gate from shutting:
//   for (;;) { { GateGuard g(gate); if (c.TryPass()) return launch(); } c.WaitBelowLimit(); }
class CollectiveGate {
 public:
  bool TryPass() {
    std::lock_guard<std::mutex> l(mu_);
    if (count_ >= limit_) return false;
    ++count_;
    cv_.notify_all();
    return true;
  }
  void WaitBelowLimit() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return count_ < limit_; });
  }
  uint64_t count() {
    std::lock_guard<std::mutex> l(mu_);
    return count_;
  }
  void Limit(uint64_t n) {
    std::lock_guard<std::mutex> l(mu_);
    limit_ = n;
    cv_.notify_all();
  }
  void Unlimit() { Limit(UINT64_MAX); }
  // Waits until at least n have passed; false after `timeout`.
  bool WaitFor(uint64_t n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [&] { return count_ >= n; });
  }
  // Whether NCCL's launches are told apart here (the driver names kernels).
  bool counting() const { return counting_.load(); }
  void set_counting(bool on) { counting_.store(on); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t count_ = 0;
  uint64_t limit_ = UINT64_MAX;
  std::atomic<bool> counting_{false};
};

// Makes `launch` (an NCCL kernel's launch) through `gate`, counted by `c` and held while `c`'s
// limit is reached: the one way the library's launch wrappers (and tests) pass both gates.
template <typename F>
auto LaunchCollective(Gate& gate, CollectiveGate& c, F launch) {
  for (;;) {
    {
      GateGuard g(gate);
      if (c.TryPass()) return launch();
    }
    c.WaitBelowLimit();
  }
}

}  // namespace cryo::fastpath
