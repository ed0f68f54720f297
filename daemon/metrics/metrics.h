#pragma once

// Every metric cryod exports, declared here and nowhere else (prefix cryo_), with every label
// value it can take: each series exists at 0 from cryod's start, so rate(), increase() and the
// chart's alerts see the first event (a series born at its first increment hides it). Besides
// these, the registry has process_* and cryo_build_info (lib/metrics/registry.h).

#include <memory>
#include <string>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace cryo::metrics {

// Label values. `op`: what cryod does; `stage`: engine::StageName of the stages each op runs
// (a test checks these against the engine's); `action`: what startup recovery did; `result`: ok
// or a status code's name in lower case (kResults has them all).
inline constexpr const char* kOps[] = {"checkpoint", "restore"};
inline constexpr const char* kCheckpointStages[] = {
    "validate",    "gpu_drain",  "gpu_lock", "gpu_checkpoint", "gpu_save", "dump",  "rootfs",
    "gpu_restore", "gpu_refill", "checksum", "publish",        "finish",   "export"};
inline constexpr const char* kRestoreStages[] = {"validate", "verify",      "wait_pids",  "rootfs",
                                                 "restore",  "gpu_restore", "gpu_refill", "done"};
inline constexpr const char* kRecoveryActions[] = {
    "completed_resumed", "completed_stopped", "rolled_back", "restore_abandoned", "unknown_step"};
// "ok" and every canonical status code's name, lower case ("deadline_exceeded").
std::vector<std::string> Results();
// Checkpoint and restore durations, 10 ms to 1 h (a multi-GPU checkpoint of hundreds of GiB
// takes tens of minutes).
const std::vector<double>& DurationBuckets();

class Metrics {
 public:
  Metrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // op: checkpoint | restore; stage: the Stage name in lower case.
  void ObserveStage(const std::string& op, const std::string& stage, double seconds);
  void ObserveOperation(const std::string& op, double seconds);
  // result: ok, or the status code name (not_found, resource_exhausted, ...).
  void CountOperation(const std::string& op, const std::string& result);
  // A failed operation's stage at the time it failed (dump, publish, gpu_lock, ...).
  void CountFailedStage(const std::string& op, const std::string& stage);
  void AddBytesWritten(uint64_t n) { bytes_written_->Increment(static_cast<double>(n)); }
  void AddBytesRead(uint64_t n) { bytes_read_->Increment(static_cast<double>(n)); }
  void SetInFlight(double n) { in_flight_->Set(n); }
  void CountRecovered(const std::string& action) {
    recovered_->Add({{"action", action}}).Increment();
  }
  void SetCheckpointsStored(double n) { stored_->Set(n); }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Histogram>* stage_seconds_;
  prometheus::Family<prometheus::Histogram>* op_seconds_;
  prometheus::Family<prometheus::Counter>* ops_total_;
  prometheus::Family<prometheus::Counter>* failed_stage_;
  prometheus::Family<prometheus::Counter>* recovered_;
  prometheus::Counter* bytes_written_;
  prometheus::Counter* bytes_read_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* stored_;
};

}  // namespace cryo::metrics
