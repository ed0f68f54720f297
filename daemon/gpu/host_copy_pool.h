#pragma once

// Staging memory cryod keeps faulted in for drains (gpu_staging_mib, docs/operations.md). A
// drain into fresh host pages runs at the pace the node fills them (about 32 GB/s on our H200
// hosts however many GPUs drain at once), so a node-wide preemption vacated two GPUs in 1.8x
// one's time. A slot of this pool is a file of cryod's huge-page tmpfs (or a memfd) whose pages
// are already there: a drain into it copies at memory speed, and the GPUs of a node vacate side
// by side. The cost is the pool's memory, held whether or not a checkpoint runs; the pool lets
// slots go while the node's available memory is under a low-water mark and takes them again
// when it is back.
//
// A slot goes from one job to another: what a drain or a restore put into it is zeroed before
// the slot is ready again, so that no job's library (which maps the slot) reads another's data.

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/fd.h"

namespace cryo::gpu {

class HostCopyPool {
 public:
  struct Counts {
    int ready = 0;
    int busy = 0;      // taken, or being zeroed
    int released = 0;  // not held now (being filled, or let go for the node's memory)
  };

  struct Options {
    int slots = 0;
    uint64_t slot_bytes = 0;
    int threads = 2;  // filling and zeroing (in the background)
    int fs = -1;      // MountHostCopyFs's; -1: memfds
    // What the node can give now (AvailableHostMemory, by default), and the mark under which
    // ready slots are let go, one per `poll`.
    std::function<uint64_t()> available;
    uint64_t low_water = 1ull << 30;
    absl::Duration poll = absl::Seconds(1);
    // Told the counts after every change (under the pool's lock: keep it short).
    std::function<void(const Counts&)> changed;
  };

  // Starts the thread that fills the slots (as the node's memory allows) and keeps watch.
  explicit HostCopyPool(Options o);
  ~HostCopyPool();
  HostCopyPool(const HostCopyPool&) = delete;
  HostCopyPool& operator=(const HostCopyPool&) = delete;

  // A ready slot of at least `bytes` (its first `bytes` zero, all of it faulted in), or an
  // invalid fd when none is ready: the caller allocates fresh memory or goes through files.
  // With `wait`, and none ready while slots given back are being zeroed, waits up to `wait`
  // for one of them (none coming back: returns at once). A restore right after a checkpoint on
  // the same node finds its slots still being zeroed (under a second for 32 GiB); without
  // them it reads at half the speed.
  // `taker` names the caller in cryod's log ("a drain", "a restore").
  UniqueFd Take(uint64_t bytes, absl::Duration wait = absl::ZeroDuration(),
                std::string_view taker = "a drain");
  // A slot back, `used` being how much of it may hold a job's data: zeroed, cut back to its
  // size (a library may have grown it), then ready again. A file not of this pool is closed.
  void Give(UniqueFd fd, uint64_t used);

  Counts counts() const;
  // Until every slot the node's memory allows is ready, or `timeout` (tests, cryod's log).
  bool WaitReady(int slots, absl::Duration timeout) const;
  std::string Describe() const;

 private:
  void Run();
  Counts CountsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Changed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One step of the thread's work, outside the lock; false when there was none.
  bool Step();

  const Options o_;
  mutable absl::Mutex mu_;
  std::vector<UniqueFd> ready_ ABSL_GUARDED_BY(mu_);
  // Given back, with what of them to zero.
  std::vector<std::pair<UniqueFd, uint64_t>> dirty_ ABSL_GUARDED_BY(mu_);
  int taken_ ABSL_GUARDED_BY(mu_) = 0;
  int zeroing_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<dev_t, ino_t>> mine_ ABSL_GUARDED_BY(mu_);  // the slots held now
  std::thread thread_;
};

// One process's host copy in cryod's memory: a slot of a pool (given back, to be zeroed, when
// done with) or memory of its own (closed).
class HostCopy {
 public:
  HostCopy() = default;
  HostCopy(UniqueFd fd, HostCopyPool* pool, uint64_t used)
      : fd_(std::move(fd)), pool_(pool), used_(used) {}
  HostCopy(HostCopy&& o) noexcept { *this = std::move(o); }
  HostCopy& operator=(HostCopy&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::move(o.fd_);
      pool_ = std::exchange(o.pool_, nullptr);
      used_ = o.used_;
    }
    return *this;
  }
  ~HostCopy() { reset(); }

  int get() const { return fd_.get(); }
  bool ok() const { return fd_.ok(); }
  bool pooled() const { return pool_ != nullptr; }
  // What of it may hold a job's data (zeroed when a pool's slot goes back).
  void use(uint64_t bytes) { used_ = std::max(used_, bytes); }
  // Back without zeroing: only for a slot no library was ever given.
  void ResetUnused() {
    used_ = 0;
    reset();
  }
  void reset() {
    if (pool_ != nullptr) pool_->Give(std::move(fd_), used_);
    fd_ = UniqueFd();
    pool_ = nullptr;
    used_ = 0;
  }

 private:
  UniqueFd fd_;
  HostCopyPool* pool_ = nullptr;
  uint64_t used_ = 0;
};

}  // namespace cryo::gpu
