#pragma once

// Timing and progress of an operation's stages: each stage's duration for the manifest, the
// result and the metrics; byte progress while a long stage runs.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/engine/operation.h"
#include "daemon/metrics/metrics.h"

namespace cryo::engine {

class StageClock {
 public:
  StageClock(std::string op, metrics::Metrics* m, Operation& o)
      : op_(std::move(op)), m_(m), o_(o) {}
  // A stage still open here is the one the operation failed in (success ends with End()).
  ~StageClock();
  void Begin(Stage s, uint64_t total = 0, std::string msg = "");
  void End();
  const std::map<std::string, uint64_t>& ms() const { return ms_; }

 private:
  std::string op_;
  metrics::Metrics* m_;
  Operation& o_;
  Stage cur_ = Stage::kUnspecified;
  absl::Time t0_;
  std::map<std::string, uint64_t> ms_;
};

// Reports a byte counter as progress every 100 ms while it lives.
class ProgressTicker {
 public:
  ProgressTicker(Operation& op, Stage stage, std::function<uint64_t()> done, uint64_t total);
  ~ProgressTicker();

 private:
  Operation& op_;
  const Stage stage_;
  const std::function<uint64_t()> done_;
  const uint64_t total_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace cryo::engine
