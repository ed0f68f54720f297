#pragma once

// A copy of a job's private anonymous memory taken while it runs, so that a leave-running
// checkpoint's freeze copies only what the job wrote since (issue 41).
//
// CRIU's own way (pre-dump with --track-mem) needs soft-dirty bits, which these kernels lack. A
// userfaultfd does the same where the kernel resolves its write-protect faults itself (Linux
// 6.7, UFFD_FEATURE_WP_ASYNC): a write to a protected page only clears its protection, and
// PAGEMAP_SCAN reports which pages were written since. A userfaultfd tracks the memory of the
// process that made it: the fast-path library makes it and gives it to cryod ("track",
// lib/contract/gpu_fastpath.h).
//
// Add() registers the process's private anonymous mappings, write-protects their pages and copies
// them into cryod's memory, in that order, while the job runs. At CRIU's post-dump
// (anon_pages.h) a page of a mapping still tracked and not written since is taken from this copy,
// after the job is thawed; every other page is copied from the frozen task, as without it.
//
// What a write-protect cannot see is left out: memory a device or the kernel writes without a
// fault (mappings marked MADV_DONTFORK as RDMA and GPU drivers mark what they pin, VM_IO and
// VM_PFNMAP ones, hugetlb), and a process that registered host memory with the GPU itself
// (cuMemHostRegister: the caller says so). Those are always copied while the job is frozen.
//
// Shared memory (MAP_SHARED | MAP_ANONYMOUS: the GPU driver's pinned host memory, which
// cudaHostAlloc and PyTorch's pinned tensors are) is written by the GPU's DMA, which no
// write-protect sees. AddShared() copies it after the fast path's drain, when the job's GPU work
// is stopped and held at the library's gate until after the freeze, so only its CPU threads can
// write it then, and those are tracked. A segment is taken only when one mapping of one tracked
// process holds it (a second process would write it beyond that process's userfaultfd) and that
// process has not forked since (the library counts its forks; a child would inherit the mapping).

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/base/fd.h"

namespace cryo::criu {

inline constexpr uint64_t kUffdFeatureWpShmem = 1ull << 12;  // UFFD_FEATURE_WP_HUGETLBFS_SHMEM

// Pages copied ahead: [vaddr, vaddr + pages * 4096) of the task, at `offset` in its copy.
struct PreCopyRun {
  uint64_t vaddr = 0;
  uint64_t pages = 0;
  uint64_t offset = 0;
};

// Of the `pages` pages from `at` on, how many at the start `runs` (in order, never overlapping)
// copied in one piece (*src: their copy, in `copy`), or (*src nullptr) how many they did not.
uint64_t CoverRuns(const std::vector<PreCopyRun>& runs, const char* copy, uint64_t at,
                   uint64_t pages, const char** src);

class PreCopy {
 public:
  struct Task {
    pid_t pid = 0;
    UniqueFd uffd;                 // closing it lifts the write-protection
    std::vector<PreCopyRun> runs;  // in address order, never overlapping
    char* copy = nullptr;
    uint64_t bytes = 0;
    int mappings = 0;           // mappings tracked
    uint64_t features = 0;      // the userfaultfd's, from its handshake
    uint64_t fork_counter = 0;  // where the library counts the process's forks (0: unknown)
    uint64_t forks = 0;         // that count when its shared memory was copied
    Task() = default;
    Task(const Task&) = delete;
    Task& operator=(const Task&) = delete;
    ~Task();
    // Of the `pages` pages from `vaddr` on, how many at the start were copied ahead in one
    // piece (*src: their copy), or (*src nullptr) how many were not.
    uint64_t Cover(uint64_t vaddr, uint64_t pages, const char** src) const {
      return CoverRuns(runs, copy, vaddr, pages, src);
    }
  };

  // A shared memory segment copied ahead: its file's data, `runs` by offset in the file (their
  // `vaddr` is that offset), held by one mapping [start, end) at `pgoff` of task `pid`.
  struct Segment {
    uint64_t shmid = 0;  // the inode of its file
    pid_t pid = 0;
    uint64_t start = 0, end = 0, pgoff = 0;
    std::vector<PreCopyRun> runs;
    char* copy = nullptr;
    uint64_t bytes = 0;
    Segment() = default;
    Segment(const Segment&) = delete;
    Segment& operator=(const Segment&) = delete;
    ~Segment();
    uint64_t Cover(uint64_t offset, uint64_t pages, const char** src) const {
      return CoverRuns(runs, copy, offset, pages, src);
    }
  };

  PreCopy() = default;
  PreCopy(const PreCopy&) = delete;
  PreCopy& operator=(const PreCopy&) = delete;

  // Tracks and copies the private anonymous memory of `pid` (running) through `uffd`, a
  // userfaultfd of that process with WP_ASYNC, with `threads` threads. An error leaves nothing
  // of this process here (its memory is then copied at the freeze).
  // `features` and `fork_counter`: the library's reply (0: shared memory is not copied ahead).
  absl::Status Add(pid_t pid, UniqueFd uffd, int threads, uint64_t features = 0,
                   uint64_t fork_counter = 0);

  // Copies ahead the shared memory segments of the tracked processes that only one of their
  // mappings holds (see above), with `threads` threads. `tree()` lists every process of the job
  // (asked after the fork counts are read). Call it once the job's GPU work is stopped; a segment
  // that cannot be taken is left to the freeze.
  // `holds(bytes)`: whether the node can hold copies of that many bytes more.
  void AddShared(const std::function<std::vector<pid_t>()>& tree, int threads,
                 const std::function<bool(uint64_t)>& holds);
  // AddShared on a thread of its own, as the driver checkpoints the job; WaitShared joins it.
  void StartShared(std::function<std::vector<pid_t>()> tree, int threads,
                   std::function<bool(uint64_t)> holds);
  void WaitShared();

  const Task* Find(pid_t pid) const;
  // The segment copied ahead as file `shmid`, if the task that held it has not forked since
  // (read now: the tasks are frozen).
  const Segment* FindShared(uint64_t shmid) const;
  int shared_segments() const { return static_cast<int>(segments_.size()); }
  uint64_t shared_bytes() const;
  absl::Duration shared_took() const { return shared_took_; }
  bool empty() const { return tasks_.empty(); }
  int tasks() const { return static_cast<int>(tasks_.size()); }
  uint64_t bytes() const;
  absl::Duration took() const { return took_; }
  // Ends the tracking (the job's writes no longer fault), keeping the copies.
  void StopTracking();
  // ... and frees the copies.
  void Release();
  ~PreCopy();

 private:
  std::vector<std::unique_ptr<Task>> tasks_;
  std::vector<std::unique_ptr<Segment>> segments_;
  absl::Duration took_, shared_took_;
  std::thread shared_thread_;
};

// Whether cryod should copy ahead: CRYO_PRE_COPY_VERIFY=1 makes the copy at the freeze also
// read every page taken from the copy ahead and count those that differ (a check of the
// tracking on a new kernel or driver; slow).
bool PreCopyVerify();

}  // namespace cryo::criu
