#include "lib/base/limits.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace cryo::limits {

bool HasControl(absl::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

absl::Status ValidateLabels(const std::map<std::string, std::string>& labels) {
  if (labels.size() > kMaxLabels) {
    return absl::InvalidArgumentError(absl::StrCat(labels.size(), " labels; at most ", kMaxLabels));
  }
  size_t total = 0;
  for (const auto& [k, v] : labels) {
    if (k.empty() || k.size() > kMaxLabelKey || HasControl(k)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label key '", absl::CEscape(absl::string_view(k).substr(0, 64)),
          "' is empty, longer than ", kMaxLabelKey, " bytes or holds control characters"));
    }
    if (v.size() > kMaxLabelValue || HasControl(v)) {
      return absl::InvalidArgumentError(absl::StrCat("label ", k, ": value longer than ",
                                                     kMaxLabelValue,
                                                     " bytes or with control characters"));
    }
    total += k.size() + v.size();
  }
  if (total > kMaxLabelBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels hold ", total, " bytes; at most ", kMaxLabelBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateWorkload(absl::string_view workload) {
  if (workload.size() > kMaxWorkload) {
    return absl::InvalidArgumentError(
        absl::StrCat("workload is longer than ", kMaxWorkload, " bytes"));
  }
  if (HasControl(workload)) return absl::InvalidArgumentError("workload holds control characters");
  return absl::OkStatus();
}

}  // namespace cryo::limits
