#include "cri-shim/call_observer.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace cryo::shim {
namespace {

constexpr absl::Duration kUnreachableLogInterval = absl::Seconds(10);

}  // namespace

std::string GrpcCodeName(grpc::StatusCode code) { return CodeName(static_cast<int>(code)); }

CallObserver::CallObserver(ShimMetrics* metrics, std::string runtime_endpoint)
    : metrics_(metrics), runtime_endpoint_(std::move(runtime_endpoint)) {}

CallObserver::Call CallObserver::Begin(absl::string_view method, absl::string_view label) {
  Call call{std::string(method), std::string(label), absl::Now()};
  if (metrics_ != nullptr) metrics_->InFlight().Increment();
  return call;
}

grpc::Status CallObserver::End(const Call& call, CallPath path, const grpc::Status& status,
                               bool upstream_unreachable) {
  grpc::Status out = status;
  if (upstream_unreachable) {
    out = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                       absl::StrCat("cryo-cri-shim: container runtime at ", runtime_endpoint_,
                                    " is unavailable: ", status.error_message()),
                       status.error_details());
    if (metrics_ != nullptr) metrics_->RuntimeUnavailable().Increment();
    absl::MutexLock lock(&log_mu_);
    ++unreachable_since_log_;
    absl::Time now = absl::Now();
    if (now - last_unreachable_log_ >= kUnreachableLogInterval) {
      CRYO_LOG(Warning) << "runtime at " << runtime_endpoint_ << " unreachable ("
                        << unreachable_since_log_ << " call(s) failed since last report, latest "
                        << call.method << "): " << status.error_message();
      last_unreachable_log_ = now;
      unreachable_since_log_ = 0;
    }
  }
  absl::Duration elapsed = absl::Now() - call.start;
  if (metrics_ != nullptr) {
    metrics_->InFlight().Decrement();
    metrics_
        ->Requests(call.label, GrpcCodeName(out.error_code()),
                   path == CallPath::kOwned ? "owned" : "forwarded")
        .Increment();
    metrics_->Latency(call.label).Observe(absl::ToDoubleSeconds(elapsed));
  }
  CRYO_LOG(Debug) << call.method << " -> " << GrpcCodeName(out.error_code()) << " in "
                  << absl::FormatDuration(elapsed) << (path == CallPath::kOwned ? " (owned)" : "")
                  << (out.ok() ? "" : absl::StrCat(": ", out.error_message()));
  return out;
}

void CallObserver::OwnedDecision(const Call& call, absl::string_view decision) {
  if (metrics_ != nullptr) metrics_->OwnedDecision(call.label, decision).Increment();
  CRYO_LOG(Debug) << call.method << ": owned handler decided " << decision;
}

}  // namespace cryo::shim
