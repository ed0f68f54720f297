#include "daemon/metrics/metrics.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "lib/base/status.h"
#include "lib/contract/stages.h"
#include "lib/metrics/registry.h"

namespace cryo::metrics {
namespace {

std::vector<const char*> StageNames(bool checkpoint) {
  std::vector<const char*> out;
  for (const contract::StageInfo& i : contract::kStages) {
    if (checkpoint ? i.checkpoint : i.restore) out.push_back(i.name);
  }
  return out;
}

const std::vector<const char*>& StagesOf(const std::string& op) {
  static const auto* checkpoint = new std::vector<const char*>(StageNames(true));
  static const auto* restore = new std::vector<const char*>(StageNames(false));
  return op == "checkpoint" ? *checkpoint : *restore;
}

}  // namespace

std::vector<std::string> Results() {
  std::vector<std::string> out = {"ok"};
  for (int c = 1; c <= 16; ++c) {
    out.push_back(absl::AsciiStrToLower(CodeName(c)));
  }
  return out;
}

const std::vector<double>& DurationBuckets() {
  // Tens of ms (small CPU jobs) to an hour (hundreds of GiB of GPU memory over a slow store).
  static const auto* b = new std::vector<double>{
      0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600};
  return *b;
}

Metrics::Metrics() : registry_(NewRegistry("cryod")) {
  stage_seconds_ = &prometheus::BuildHistogram()
                        .Name("cryo_stage_duration_seconds")
                        .Help("Duration of each stage of checkpoints and restores")
                        .Register(*registry_);
  op_seconds_ = &prometheus::BuildHistogram()
                     .Name("cryo_operation_duration_seconds")
                     .Help("End-to-end duration of checkpoints and restores")
                     .Register(*registry_);
  ops_total_ = &prometheus::BuildCounter()
                    .Name("cryo_operations_total")
                    .Help("Checkpoints and restores by result (ok or the failure's status code)")
                    .Register(*registry_);
  failed_stage_ = &prometheus::BuildCounter()
                       .Name("cryo_failed_stage_total")
                       .Help("Failed checkpoints and restores by the stage they failed in")
                       .Register(*registry_);
  recovered_ = &prometheus::BuildCounter()
                    .Name("cryo_recovered_operations_total")
                    .Help("Operations found in the journal at startup, by what was done")
                    .Register(*registry_);
  bytes_written_ = &prometheus::BuildCounter()
                        .Name("cryo_store_written_bytes_total")
                        .Help("Image bytes written to the checkpoint store")
                        .Register(*registry_)
                        .Add({});
  bytes_referenced_ = &prometheus::BuildCounter()
                           .Name("cryo_store_referenced_bytes_total")
                           .Help(
                               "Checkpoint bytes not written because an earlier checkpoint of "
                               "the workload holds them unchanged (incremental GPU data)")
                           .Register(*registry_)
                           .Add({});
  bytes_read_ = &prometheus::BuildCounter()
                     .Name("cryo_store_read_bytes_total")
                     .Help("Image bytes read (verified) from the checkpoint store")
                     .Register(*registry_)
                     .Add({});
  in_flight_ = &prometheus::BuildGauge()
                    .Name("cryo_operations_in_flight")
                    .Help("Checkpoints and restores running now")
                    .Register(*registry_)
                    .Add({});
  staging_ = &prometheus::BuildGauge()
                  .Name("cryo_gpu_staging_slots")
                  .Help("Slots of cryod's staging memory for drains (gpu_staging_mib), by state")
                  .Register(*registry_);
  stored_ = &prometheus::BuildGauge()
                 .Name("cryo_checkpoints_stored")
                 .Help("Published checkpoints in the store at the last listing")
                 .Register(*registry_)
                 .Add({});
  plan_ = &prometheus::BuildCounter()
               .Name("cryo_stop_plan_total")
               .Help(
                   "What the plan at a stop decided: checkpoint, or fall back to the newest "
                   "good checkpoint because one would not fit the grace period")
               .Register(*registry_);
  work_lost_ = &prometheus::BuildHistogram()
                    .Name("cryo_stop_work_lost_seconds")
                    .Help("Work lost by stops that resumed from an earlier checkpoint (its age)")
                    .Register(*registry_)
                    .Add({}, DurationBuckets());
  periodic_ = &prometheus::BuildCounter()
                   .Name("cryo_periodic_checkpoints_total")
                   .Help("Periodic checkpoints started, ended, and skipped by reason")
                   .Register(*registry_);
  stall_ = &prometheus::BuildHistogram()
                .Name("cryo_periodic_stall_seconds")
                .Help("How long each periodic checkpoint held its job stopped")
                .Register(*registry_)
                .Add({}, DurationBuckets());
  newest_age_ = &prometheus::BuildGauge()
                     .Name("cryo_newest_checkpoint_age_seconds")
                     .Help(
                         "Age of the newest good checkpoint of each workload with periodic "
                         "checkpoints")
                     .Register(*registry_);
  grace_warnings_ = &prometheus::BuildCounter()
                         .Name("cryo_periodic_grace_warnings_total")
                         .Help(
                             "Opted-in containers whose predicted checkpoint takes longer "
                             "than their pod's terminationGracePeriodSeconds")
                         .Register(*registry_)
                         .Add({});
  for (const char* d : kPlanDecisions) plan_->Add({{"decision", d}});
  for (const char* r : kPeriodicResults) periodic_->Add({{"result", r}});
  // Every series at 0 from the start (see metrics.h).
  for (const char* op : kOps) {
    op_seconds_->Add({{"op", op}}, DurationBuckets());
    for (const std::string& r : Results()) ops_total_->Add({{"op", op}, {"result", r}});
    for (const char* stage : StagesOf(op)) {
      stage_seconds_->Add({{"op", op}, {"stage", stage}}, DurationBuckets());
      failed_stage_->Add({{"op", op}, {"stage", stage}});
    }
  }
  for (const char* a : kRecoveryActions) recovered_->Add({{"action", a}});
}

void Metrics::ObserveStage(const std::string& op, const std::string& stage, double seconds) {
  stage_seconds_->Add({{"op", op}, {"stage", stage}}, DurationBuckets()).Observe(seconds);
}

void Metrics::ObserveOperation(const std::string& op, double seconds) {
  op_seconds_->Add({{"op", op}}, DurationBuckets()).Observe(seconds);
}

void Metrics::CountOperation(const std::string& op, const std::string& result) {
  ops_total_->Add({{"op", op}, {"result", result}}).Increment();
}

void Metrics::ForgetWorkload(const std::string& workload) {
  auto& g = newest_age_->Add({{"workload", workload}});
  newest_age_->Remove(&g);
}

void Metrics::CountFailedStage(const std::string& op, const std::string& stage) {
  failed_stage_->Add({{"op", op}, {"stage", stage}}).Increment();
}

}  // namespace cryo::metrics
