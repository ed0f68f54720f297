#pragma once

// A checkpoint's GPU processes on the driver's path (docs/architecture.md, "Participants"):
// their records (GpuProcess, as the journal entry and the manifest hold them) and whether their
// GPU state is back in the job. The steps gpu_lock, gpu_checkpoint and gpu_resume are its
// operations; its undo needs only the records (recovery), or this session in a live rollback.

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/records/gpu_process.h"
#include "lib/base/status.h"

namespace cryo::gpu {

class DriverSession {
 public:
  DriverSession() = default;
  explicit DriverSession(std::vector<GpuProcess> procs) : procs_(std::move(procs)) {}

  bool empty() const { return procs_.empty(); }
  size_t size() const { return procs_.size(); }
  const std::vector<GpuProcess>& records() const { return procs_; }

  // gpu_lock: every process's CUDA calls wait (DEADLINE_EXCEEDED past `timeout`).
  absl::Status Lock(GpuManager& m, absl::Duration timeout) { return m.Lock(procs_, timeout); }
  // gpu_checkpoint: the driver moves what is left in each context into the process's memory,
  // which CRIU dumps next; the records gain what it took.
  absl::Status Checkpoint(GpuManager& m) { return m.Checkpoint(procs_); }
  // gpu_resume: restored and unlocked, the GPU state is back in the job.
  absl::Status Resume(GpuManager& m) {
    CRYO_RETURN_IF_ERROR(m.Restore(procs_, {}));
    CRYO_RETURN_IF_ERROR(m.Unlock(procs_));
    back_ = true;
    return absl::OkStatus();
  }
  // The undo of gpu_lock and gpu_checkpoint, from the journal's `records`: the driver's state
  // given back from wherever it got. `live` (null in recovery): nothing once it is back.
  static void Undo(GpuManager& m, const std::vector<GpuProcess>& records, DriverSession* live) {
    if (records.empty() || (live != nullptr && live->back_)) return;
    m.Rollback(records);
    if (live != nullptr) live->back_ = true;
  }

 private:
  std::vector<GpuProcess> procs_;
  bool back_ = false;
};

}  // namespace cryo::gpu
