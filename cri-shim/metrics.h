// Every metric of cryo-cri-shim, declared in one place (prefix cryo_shim_). The series of the
// shim's own work (container operations, owned calls' decisions) exist at 0 from the start, for
// every label value below, so that increase() and the chart's alerts see the first failure;
// requests by method and code appear with their first call (methods x codes would be thousands
// of idle series).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace cryo::shim {

// cryo_shim_container_operations_total's ops and the results each can have.
struct ContainerOpLabels {
  const char* op;
  std::vector<const char*> results;
};
const std::vector<ContainerOpLabels>& ContainerOps();
// The CRI methods the shim owns (their metrics labels) and what it may decide for each.
inline constexpr const char* kOwnedMethodLabels[] = {
    "RuntimeService/CreateContainer", "RuntimeService/StartContainer",
    "RuntimeService/StopContainer", "RuntimeService/CheckpointContainer"};
inline constexpr const char* kOwnedDecisions[] = {"forward", "reply", "fail"};

class ShimMetrics {
 public:
  static absl::StatusOr<std::unique_ptr<ShimMetrics>> Create(
      std::shared_ptr<prometheus::Registry> registry);

  // cryo_shim_requests_total{method,code,path}: path is "forwarded" or "owned".
  prometheus::Counter& Requests(absl::string_view method_label, absl::string_view code,
                                absl::string_view path);
  // cryo_shim_request_duration_seconds{method}: from the call's arrival to its status.
  prometheus::Histogram& Latency(absl::string_view method_label);
  // cryo_shim_requests_in_flight
  prometheus::Gauge& InFlight() { return *in_flight_; }
  // cryo_shim_runtime_unavailable_total: calls answered UNAVAILABLE because the runtime
  // socket could not be reached.
  prometheus::Counter& RuntimeUnavailable() { return *runtime_unavailable_; }
  // cryo_shim_owned_decisions_total{method,decision}: forward, reply or fail.
  prometheus::Counter& OwnedDecision(absl::string_view method_label, absl::string_view decision);
  // cryo_shim_container_operations_total{op,result}: op is checkpoint_on_stop, checkpoint_api,
  // restore or import_image (a checkpoint image); result is ok, failed, skipped (a stop below
  // the pod's minimum grace, or one that left no time) or, for stops, fell_back (cryod's plan
  // took no checkpoint: it would not have fit; the replacement resumes from an earlier one).
  prometheus::Counter& ContainerOperation(absl::string_view op, absl::string_view result);

  prometheus::Registry& registry() { return *registry_; }

 private:
  explicit ShimMetrics(std::shared_ptr<prometheus::Registry> registry);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* latency_;
  prometheus::Family<prometheus::Counter>* owned_decisions_;
  prometheus::Family<prometheus::Counter>* container_ops_;
  prometheus::Gauge* in_flight_;
  prometheus::Counter* runtime_unavailable_;
};

// Label for a full gRPC method name: "RuntimeService/Version" for CRI v1 methods known to
// this build, "other" for anything else, so clients cannot blow up label cardinality.
std::string MethodLabel(absl::string_view full_method);

}  // namespace cryo::shim
