#pragma once

// A restore's GPU data read from the store into staging memory (gpu_staging_mib) while CRIU
// restores the processes. The refill then copies it from memory at PCIe speed instead of the
// library reading the store after CRIU is done: with the store on a tmpfs, that read was 2.2 s
// of a 3.1 s restore of 32 GiB (docs/benchmarks.md, "A fast store"). Every file is checked
// against the checksums the checkpoint recorded; the job's gate opens only after that.
//
// A library that follows (gpu_fastpath.h, "Following") is given the slot while the read is still
// running, with a progress page per process: it copies each piece to the GPU once the read has
// passed it, and opens the gate on the verdict written when the read is done.

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/gpu/host_copy.h"
#include "daemon/gpu/host_copy_pool.h"
#include "daemon/gpu/progress_page.h"
#include "lib/base/fd.h"

namespace cryo::engine {

class GpuPrefetch {
 public:
  struct Process {
    uint64_t bytes = 0;                    // 0: nothing to read (it owns no GPU data)
    std::vector<gpu::ChunkSources> files;  // their descriptors are in Start's `open`
  };

  // Takes a slot of `pool` for every process with data and reads them in the background, each
  // in the fast path's layout of `stripe`. A slot given back and being zeroed is waited for a
  // few seconds. FAILED_PRECONDITION, with no slot kept and nothing started, when the pool has
  // not a slot for every one.
  static absl::StatusOr<std::unique_ptr<GpuPrefetch>> Start(gpu::HostCopyPool& pool,
                                                            std::vector<Process> procs,
                                                            std::vector<UniqueFd> open,
                                                            uint64_t stripe);
  ~GpuPrefetch();  // waits for the reads; the slots go back to the pool, to be zeroed
  GpuPrefetch(const GpuPrefetch&) = delete;
  GpuPrefetch& operator=(const GpuPrefetch&) = delete;

  // Waits for the reads: OK, or the first error (DATA_LOSS for a file that does not hold what
  // the checkpoint recorded).
  absl::Status Wait();
  // Process i's data (complete after an OK Wait); invalid for one without data.
  const gpu::HostCopy& copy(size_t i) const { return copies_[i]; }
  // Process i's progress page (-1 for one without data).
  int progress(size_t i) const { return pages_[i].page ? pages_[i].page->fd() : -1; }
  uint64_t bytes() const { return bytes_; }
  absl::Duration read_time() const { return read_time_; }

 private:
  GpuPrefetch() = default;
  // A process's progress page, and where each of its files' readers is (file offsets).
  struct Page {
    std::unique_ptr<gpu::ProgressPage> page;
    std::unique_ptr<std::atomic<uint64_t>[]> next;
  };
  // File k of process i has its first `read` bytes in memory: "ready" moves up to the first
  // byte of the stream some file has not read yet.
  void Advance(size_t i, size_t k, uint64_t read, uint64_t stripe);

  std::vector<Process> procs_;
  std::vector<Page> pages_;
  std::vector<UniqueFd> open_;
  std::vector<gpu::HostCopy> copies_;
  uint64_t bytes_ = 0;
  absl::Status status_;
  absl::Duration read_time_;
  std::thread thread_;
};

}  // namespace cryo::engine
