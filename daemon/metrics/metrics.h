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

// Label values. `op`: what cryod does; `stage`: the names of the stages each op runs
// (contract::kStages); `action`: what startup recovery did; `result`: ok
// or a status code's name in lower case (kResults has them all).
inline constexpr const char* kOps[] = {"checkpoint", "restore"};
// The stages each op reports: lib/contract/stages.h.
// What the plan at a stop decided (engine, `plan` step): checkpoint (it fits the time left),
// fall_back (it would not: no checkpoint, the replacement resumes from the newest good one),
// no_estimate (nothing measured on this node yet), no_fallback (it would not fit, but there is no
// earlier checkpoint to resume from: tried anyway).
inline constexpr const char* kPlanDecisions[] = {"checkpoint", "fall_back", "no_estimate",
                                                 "no_fallback"};
// What the periodic schedule did with a due checkpoint: started, or skipped and why (busy: the
// previous one of the job is still being written; space: the store is short of it; node_cap:
// the node runs its cap of them already) and how started ones ended.
inline constexpr const char* kPeriodicResults[] = {
    "started", "ok", "failed", "skipped_busy", "skipped_space", "skipped_node_cap"};
inline constexpr const char* kRecoveryActions[] = {"completed_resumed", "completed_stopped",
                                                   "rolled_back",       "restore_abandoned",
                                                   "earlier_boot",      "unknown_step"};
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
  // Checkpoints' bytes other checkpoints hold (incremental GPU data): not written.
  void AddBytesReferenced(uint64_t n) { bytes_referenced_->Increment(static_cast<double>(n)); }
  void AddBytesRead(uint64_t n) { bytes_read_->Increment(static_cast<double>(n)); }
  void SetInFlight(double n) { in_flight_->Set(n); }
  void CountRecovered(const std::string& action) {
    recovered_->Add({{"action", action}}).Increment();
  }
  void SetCheckpointsStored(double n) { stored_->Set(n); }
  void CountPlan(const std::string& decision) { plan_->Add({{"decision", decision}}).Increment(); }
  // The work a stop lost by resuming from an earlier checkpoint (its age), seconds.
  void ObserveWorkLost(double seconds) { work_lost_->Observe(seconds); }
  void CountPeriodic(const std::string& result) {
    periodic_->Add({{"result", result}}).Increment();
  }
  // How long a periodic checkpoint held its job stopped (the freeze to the job running again).
  void ObservePeriodicStall(double seconds) { stall_->Observe(seconds); }
  // Age of the newest good checkpoint of a workload with periodic checkpoints.
  void SetNewestAge(const std::string& workload, double seconds) {
    newest_age_->Add({{"workload", workload}}).Set(seconds);
  }
  void ForgetWorkload(const std::string& workload);
  // Opted-in containers whose predicted checkpoint exceeds their pod's grace period.
  void CountGraceWarning() { grace_warnings_->Increment(); }
  // The staging memory's slots (gpu_staging_mib): ready, in use (taken or being zeroed), and
  // not held (being filled, or let go while the node is short of memory).
  void SetStagingSlots(int ready, int in_use, int not_held) {
    staging_->Add({{"state", "ready"}}).Set(ready);
    staging_->Add({{"state", "in_use"}}).Set(in_use);
    staging_->Add({{"state", "not_held"}}).Set(not_held);
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Histogram>* stage_seconds_;
  prometheus::Family<prometheus::Histogram>* op_seconds_;
  prometheus::Family<prometheus::Counter>* ops_total_;
  prometheus::Family<prometheus::Counter>* failed_stage_;
  prometheus::Family<prometheus::Counter>* recovered_;
  prometheus::Counter* bytes_written_;
  prometheus::Counter* bytes_referenced_;
  prometheus::Counter* bytes_read_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* stored_;
  prometheus::Family<prometheus::Counter>* plan_;
  prometheus::Histogram* work_lost_;
  prometheus::Family<prometheus::Counter>* periodic_;
  prometheus::Histogram* stall_;
  prometheus::Family<prometheus::Gauge>* newest_age_;
  prometheus::Counter* grace_warnings_;
  prometheus::Family<prometheus::Gauge>* staging_;
};

}  // namespace cryo::metrics
