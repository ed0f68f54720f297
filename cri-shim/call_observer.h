// The one wrapper around every CRI call the shim serves: logging, metrics and status mapping.
#pragma once

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cri-shim/metrics.h"
#include "grpcpp/support/status.h"

namespace cryo::shim {

// How a call was served.
enum class CallPath { kForwarded, kOwned };

class CallObserver {
 public:
  // metrics may be null (then nothing is recorded).
  CallObserver(ShimMetrics* metrics, std::string runtime_endpoint);

  struct Call {
    std::string method;  // full gRPC name
    std::string label;   // bounded metrics label
    absl::Time start;
  };

  // label: the method's bounded metrics label (see cri_methods.h).
  Call Begin(absl::string_view method, absl::string_view label);

  // Records the end of a call and returns the status to send back. upstream_unreachable says the
  // status came from gRPC failing to reach the runtime, not from the runtime: it is rewritten
  // into an UNAVAILABLE that names the runtime endpoint; every other status passes unchanged.
  grpc::Status End(const Call& call, CallPath path, const grpc::Status& status,
                   bool upstream_unreachable);

  void OwnedDecision(const Call& call, absl::string_view decision);

  const std::string& runtime_endpoint() const { return runtime_endpoint_; }

 private:
  ShimMetrics* metrics_;
  std::string runtime_endpoint_;

  // "runtime unreachable" is logged at most once per interval (kubelet polls every second).
  absl::Mutex log_mu_;
  absl::Time last_unreachable_log_ ABSL_GUARDED_BY(log_mu_) = absl::InfinitePast();
  int64_t unreachable_since_log_ ABSL_GUARDED_BY(log_mu_) = 0;
};

// absl and gRPC share the canonical code numbering.
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace cryo::shim
