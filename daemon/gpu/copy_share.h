#pragma once

// The node's copy threads, shared by the fast-path drains that run at once.
//
// A drain's copies run on threads in each job process (the library's pool), as many as cryod
// asks for: by default one per core. Two jobs of a node preempted together, each with a thread
// per core, ran twice the node's cores and drained 26-30 GB/s together where one alone drained
// 30-38 (runs 40 and 55 of docs/gpu.md); with half the threads each, two drained 33.8 GB/s
// together (run 56). So each process that is about to drain claims a share from the moment its
// checkpoint finds it (validate) until its drain is over, and a drain asks each of its processes
// for the node's threads divided by the processes claiming (ranks of one job count one each).
// A lone job keeps every thread.

#include <mutex>

namespace cryo::gpu {

class CopyShare {
 public:
  // The fewest threads a drain is given, however many share the node.
  static constexpr int kMinThreads = 4;

  // A claim for `processes` processes, held until Release or destruction.
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& o) noexcept : share_(o.share_), n_(o.n_) { o.share_ = nullptr; }
    Claim& operator=(Claim&& o) noexcept {
      if (this != &o) {
        Release();
        share_ = o.share_;
        n_ = o.n_;
        o.share_ = nullptr;
      }
      return *this;
    }
    ~Claim() { Release(); }
    void Release();

   private:
    friend class CopyShare;
    Claim(CopyShare* s, int n) : share_(s), n_(n) {}
    CopyShare* share_ = nullptr;
    int n_ = 0;
  };

  Claim Take(int processes);
  // Threads for each process of a drain: node_threads over the processes claiming (at least one:
  // the caller's own), never fewer than kMinThreads nor more than node_threads.
  int ThreadsEach(int node_threads) const;
  int claimed() const;

 private:
  mutable std::mutex mu_;
  int claimed_ = 0;
};

}  // namespace cryo::gpu
