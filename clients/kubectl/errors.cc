#include "clients/kubectl/errors.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cryo::kubectl {
namespace {

constexpr char kExitPayload[] = "type.cryo.dev/kubectl-cryo/exit-code";

absl::StatusCode CodeFor(ExitCode code) {
  switch (code) {
    case kExitUsage:
      return absl::StatusCode::kInvalidArgument;
    case kExitApiUnreachable:
    case kExitCryodFailed:
      return absl::StatusCode::kUnavailable;
    case kExitUnauthorized:
      return absl::StatusCode::kPermissionDenied;
    case kExitPodNotFound:
    case kExitContainerNotFound:
    case kExitCheckpointNotFound:
    case kExitSourcePodGone:
    case kExitWorkloadNotFound:
      return absl::StatusCode::kNotFound;
    case kExitKubectlMissing:
      return absl::StatusCode::kFailedPrecondition;
    case kExitContainerNotRunning:
    case kExitPodNotScheduled:
    case kExitNoCryo:
    case kExitKubeletRefused:
    case kExitNotThroughCryo:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kUnknown;
  }
}

}  // namespace

absl::Status Failure(ExitCode code, absl::string_view message) {
  absl::Status s(CodeFor(code), message);
  s.SetPayload(kExitPayload, absl::Cord(absl::StrCat(static_cast<int>(code))));
  return s;
}

int ExitCodeOf(const absl::Status& s) {
  if (s.ok()) return kExitOk;
  auto p = s.GetPayload(kExitPayload);
  int code;
  if (p && absl::SimpleAtoi(std::string(*p), &code)) return code;
  return kExitError;
}

bool IsApiNotFound(const absl::Status& s) {
  return absl::IsNotFound(s) && !s.GetPayload(kExitPayload).has_value();
}

absl::Status WithContext(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  absl::Status out(s.code(), absl::StrCat(context, ": ", s.message()));
  s.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace cryo::kubectl
