#pragma once

// Bounds on what describes a job: its labels and workload key. Requests are checked against them
// (daemon/engine/validate.h), and so are manifests read from a store, since a manifest another
// node (or anyone who can write the store) wrote is listed by every node: three 1 MiB labels
// once made every list fail for everyone (gRPC's 4 MiB message limit).

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cryo::limits {

inline constexpr size_t kMaxLabels = 64;
inline constexpr size_t kMaxLabelKey = 253;  // a Kubernetes label or annotation name
inline constexpr size_t kMaxLabelValue = 4096;
inline constexpr size_t kMaxLabelBytes = 16 << 10;  // all keys and values together
inline constexpr size_t kMaxWorkload = 253;

// Whether `s` holds a C0 control character or DEL (terminal escapes, line breaks).
bool HasControl(absl::string_view s);

// INVALID_ARGUMENT naming what is wrong: more labels than kMaxLabels, an empty or long key, a
// long value, control characters, or more than kMaxLabelBytes in all.
absl::Status ValidateLabels(const std::map<std::string, std::string>& labels);
// INVALID_ARGUMENT for a workload key longer than kMaxWorkload or with control characters.
absl::Status ValidateWorkload(absl::string_view workload);

}  // namespace cryo::limits
