#pragma once

// What a checkpoint or restore request may hold, checked before anything else looks at it.
// Requests come from root's clients, the shim and node-wide triggers; their contents end up in
// manifests that every node lists, so sizes are bounded here (three 1 MiB labels once made
// every list fail for everyone: gRPC's 4 MiB message limit).

#include "absl/status/status.h"
#include "daemon/engine/types.h"
#include "lib/base/limits.h"

namespace cryo::engine {

// The same bounds hold for manifests read from a store (daemon/store/manifest.cc).
inline constexpr size_t kMaxLabels = limits::kMaxLabels;
inline constexpr size_t kMaxLabelKey = limits::kMaxLabelKey;
inline constexpr size_t kMaxLabelValue = limits::kMaxLabelValue;
inline constexpr size_t kMaxLabelBytes = limits::kMaxLabelBytes;
inline constexpr size_t kMaxWorkload = limits::kMaxWorkload;
inline constexpr size_t kMaxGpuMap = 64;
inline constexpr size_t kMaxPathBytes = 4096;

// INVALID_ARGUMENT naming the field: ids that are not safe path components, a pid and a
// container at once, labels beyond the limits above or with control characters, a workload
// with control characters, an export path that is not absolute.
absl::Status ValidateRequest(const CheckpointRequest& r);
absl::Status ValidateRequest(const RestoreRequest& r);

}  // namespace cryo::engine
