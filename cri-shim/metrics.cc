#include "cri-shim/metrics.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cri-shim/cri_methods.h"

namespace cryo::shim {
namespace {

// Latency buckets from 100 us (a forwarded Version) to 1 h (the checkpoint of a large
// multi-GPU job, or its restore).
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5,
      1,      2.5,     5,      10,    30,     60,    120,  300,   600,  1200, 1800, 3600};
  return *buckets;
}

}  // namespace

const std::vector<ContainerOpLabels>& ContainerOps() {
  static const auto* ops = new std::vector<ContainerOpLabels>{
      {"checkpoint_on_stop", {"ok", "failed", "skipped", "fell_back"}},
      {"checkpoint_api", {"ok", "failed"}},
      {"restore", {"ok", "failed"}},
      {"import_image", {"ok", "failed"}},
  };
  return *ops;
}

std::string MethodLabel(absl::string_view full_method) { return ClassifyMethod(full_method).label; }

ShimMetrics::ShimMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {
  requests_ = &prometheus::BuildCounter()
                   .Name("cryo_shim_requests_total")
                   .Help("CRI calls served by the shim, by method, gRPC status code and path.")
                   .Register(*registry_);
  latency_ = &prometheus::BuildHistogram()
                  .Name("cryo_shim_request_duration_seconds")
                  .Help("Time from a CRI call's arrival at the shim to its status.")
                  .Register(*registry_);
  owned_decisions_ = &prometheus::BuildCounter()
                          .Name("cryo_shim_owned_decisions_total")
                          .Help("What the shim's own handlers did with the calls they own.")
                          .Register(*registry_);
  container_ops_ = &prometheus::BuildCounter()
                        .Name("cryo_shim_container_operations_total")
                        .Help("Checkpoints and restores of containers the shim asked cryod for.")
                        .Register(*registry_);
  in_flight_ = &prometheus::BuildGauge()
                    .Name("cryo_shim_requests_in_flight")
                    .Help("CRI calls the shim is serving now.")
                    .Register(*registry_)
                    .Add({});
  runtime_unavailable_ =
      &prometheus::BuildCounter()
           .Name("cryo_shim_runtime_unavailable_total")
           .Help("CRI calls answered UNAVAILABLE because the runtime socket was unreachable.")
           .Register(*registry_)
           .Add({});
  // Every series of the shim's own work at 0 from the start (see metrics.h).
  for (const auto& o : ContainerOps()) {
    for (const char* r : o.results) ContainerOperation(o.op, r);
  }
  for (const char* m : kOwnedMethodLabels) {
    Latency(m);
    for (const char* d : kOwnedDecisions) OwnedDecision(m, d);
  }
}

absl::StatusOr<std::unique_ptr<ShimMetrics>> ShimMetrics::Create(
    std::shared_ptr<prometheus::Registry> registry) {
  if (registry == nullptr) return absl::InvalidArgumentError("metrics registry is null");
  try {
    return std::unique_ptr<ShimMetrics>(new ShimMetrics(std::move(registry)));
  } catch (const std::exception& e) {
    // prometheus-cpp throws on a name registered twice with other labels.
    return absl::InternalError(absl::StrCat("registering shim metrics: ", e.what()));
  }
}

prometheus::Counter& ShimMetrics::Requests(absl::string_view method_label, absl::string_view code,
                                           absl::string_view path) {
  return requests_->Add({{"method", std::string(method_label)},
                         {"code", std::string(code)},
                         {"path", std::string(path)}});
}

prometheus::Histogram& ShimMetrics::Latency(absl::string_view method_label) {
  return latency_->Add({{"method", std::string(method_label)}}, LatencyBuckets());
}

prometheus::Counter& ShimMetrics::OwnedDecision(absl::string_view method_label,
                                                absl::string_view decision) {
  return owned_decisions_->Add(
      {{"method", std::string(method_label)}, {"decision", std::string(decision)}});
}

prometheus::Counter& ShimMetrics::ContainerOperation(absl::string_view op,
                                                     absl::string_view result) {
  return container_ops_->Add({{"op", std::string(op)}, {"result", std::string(result)}});
}

}  // namespace cryo::shim
