#include "daemon/metrics/metrics.h"

namespace cryo::metrics {
namespace {
// Checkpoints range from tens of ms (small CPU jobs) to minutes (tens of GiB of GPU memory).
const prometheus::Histogram::BucketBoundaries kBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                          2.5,  5,     10,   30,  60,   120, 300};
}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
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
  stored_ = &prometheus::BuildGauge()
                 .Name("cryo_checkpoints_stored")
                 .Help("Published checkpoints in the store at the last listing")
                 .Register(*registry_)
                 .Add({});
}

void Metrics::ObserveStage(const std::string& op, const std::string& stage, double seconds) {
  stage_seconds_->Add({{"op", op}, {"stage", stage}}, kBuckets).Observe(seconds);
}

void Metrics::ObserveOperation(const std::string& op, double seconds) {
  op_seconds_->Add({{"op", op}}, kBuckets).Observe(seconds);
}

void Metrics::CountOperation(const std::string& op, const std::string& result) {
  ops_total_->Add({{"op", op}, {"result", result}}).Increment();
}

void Metrics::CountFailedStage(const std::string& op, const std::string& stage) {
  failed_stage_->Add({{"op", op}, {"stage", stage}}).Increment();
}

}  // namespace cryo::metrics
