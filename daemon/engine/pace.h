#pragma once

// How fast checkpoints go on this node, learnt from the ones it took: the plan at a stop and the
// periodic schedule predict a checkpoint's time from it. A sample is a whole checkpoint, its
// bytes over the time from its start to its publish, so fixed costs (CRIU's start, the fsync)
// are in it too. A workload's own recent checkpoints predict its next one best (the same job,
// the same size and shape); a workload without any is predicted from the node's. Each uses the
// median of its recent samples: one slow checkpoint (a busy store) neither hides nor dominates
// the others.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cryo::engine {

class CheckpointPace {
 public:
  static constexpr size_t kSamples = 8;       // per workload, and for the node
  static constexpr size_t kWorkloads = 1024;  // remembered; the least recently added go first

  // A checkpoint of `workload` of `bytes` that took `took` (ignored when either is zero).
  void Add(const std::string& workload, uint64_t bytes, absl::Duration took);
  // Bytes per second of the workload's recent samples, else the node's (median); nullopt before
  // any.
  std::optional<double> BytesPerSecond(const std::string& workload) const;
  // The time a checkpoint of `bytes` of `workload` is expected to take; nullopt before any
  // sample.
  std::optional<absl::Duration> Predict(const std::string& workload, uint64_t bytes) const;

 private:
  struct Samples {
    std::deque<double> rates;  // newest last
    uint64_t added = 0;        // when, in Add() calls
  };
  mutable absl::Mutex mu_;
  Samples node_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Samples> workloads_ ABSL_GUARDED_BY(mu_);
  uint64_t adds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cryo::engine
