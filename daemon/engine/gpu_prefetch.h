#pragma once

// A restore's GPU data read from the store into staging memory (gpu_staging_mib) while CRIU
// restores the processes. The refill then copies it from memory at PCIe speed instead of the
// library reading the store after CRIU is done: with the store on a tmpfs, that read was 2.2 s
// of a 3.1 s restore of 32 GiB (docs/benchmarks.md, "A fast store"). Every file is checked
// against the checksums the checkpoint recorded before any of it reaches the job.

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/gpu/host_copy.h"
#include "daemon/gpu/host_copy_pool.h"
#include "lib/base/fd.h"

namespace cryo::engine {

class GpuPrefetch {
 public:
  struct Process {
    uint64_t bytes = 0;                    // 0: nothing to read (it owns no GPU data)
    std::vector<gpu::ChunkSources> files;  // their descriptors are in Start's `open`
  };

  // Takes a slot of `pool` for every process with data and reads them in the background, each
  // in the fast path's layout of `stripe`. FAILED_PRECONDITION, with no slot kept and nothing
  // started, when the pool has not a ready slot for every one.
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
  // Process i's data (after an OK Wait); invalid for one without data.
  const gpu::HostCopy& copy(size_t i) const { return copies_[i]; }
  uint64_t bytes() const { return bytes_; }
  absl::Duration read_time() const { return read_time_; }

 private:
  GpuPrefetch() = default;

  std::vector<Process> procs_;
  std::vector<UniqueFd> open_;
  std::vector<gpu::HostCopy> copies_;
  uint64_t bytes_ = 0;
  absl::Status status_;
  absl::Duration read_time_;
  std::thread thread_;
};

}  // namespace cryo::engine
