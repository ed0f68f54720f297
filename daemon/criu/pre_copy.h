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

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/base/fd.h"

namespace cryo::criu {

// Pages copied ahead: [vaddr, vaddr + pages * 4096) of the task, at `offset` in its copy.
struct PreCopyRun {
  uint64_t vaddr = 0;
  uint64_t pages = 0;
  uint64_t offset = 0;
};

class PreCopy {
 public:
  struct Task {
    pid_t pid = 0;
    UniqueFd uffd;                 // closing it lifts the write-protection
    std::vector<PreCopyRun> runs;  // in address order, never overlapping
    char* copy = nullptr;
    uint64_t bytes = 0;
    int mappings = 0;  // mappings tracked
    Task() = default;
    Task(const Task&) = delete;
    Task& operator=(const Task&) = delete;
    ~Task();
    // Of the `pages` pages from `vaddr` on, how many at the start were copied ahead in one
    // piece (*src: their copy), or (*src nullptr) how many were not.
    uint64_t Cover(uint64_t vaddr, uint64_t pages, const char** src) const;
  };

  PreCopy() = default;
  PreCopy(const PreCopy&) = delete;
  PreCopy& operator=(const PreCopy&) = delete;

  // Tracks and copies the private anonymous memory of `pid` (running) through `uffd`, a
  // userfaultfd of that process with WP_ASYNC, with `threads` threads. An error leaves nothing
  // of this process here (its memory is then copied at the freeze).
  absl::Status Add(pid_t pid, UniqueFd uffd, int threads);

  const Task* Find(pid_t pid) const;
  bool empty() const { return tasks_.empty(); }
  int tasks() const { return static_cast<int>(tasks_.size()); }
  uint64_t bytes() const;
  absl::Duration took() const { return took_; }
  // Ends the tracking (the job's writes no longer fault) and frees the copies.
  void Release() { tasks_.clear(); }

 private:
  std::vector<std::unique_ptr<Task>> tasks_;
  absl::Duration took_;
};

// Whether cryod should copy ahead: CRYO_PRE_COPY_VERIFY=1 makes the copy at the freeze also
// read every page taken from the copy ahead and count those that differ (a check of the
// tracking on a new kernel or driver; slow).
bool PreCopyVerify();

}  // namespace cryo::criu
