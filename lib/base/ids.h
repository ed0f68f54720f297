#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace cryo {

inline constexpr size_t kMaxIdLength = 128;

// A checkpoint id becomes a directory name in a shared store: [A-Za-z0-9._-], 1..128 bytes,
// not starting with '.' or '-' (no "..", no hidden or option-like names).
absl::Status ValidateCheckpointId(absl::string_view id);

// Turns any text (a command name, a workload key) into a safe id fragment.
std::string SanitizeIdPart(absl::string_view s);

// "<workload>-<YYYYmmdd-HHMMSS>-<4 hex>": sortable by time, unique enough across nodes.
std::string MakeCheckpointId(absl::string_view workload, absl::Time now);

// Random hex for operation ids and staging names.
std::string RandomHex(int bytes);

// Whether `s` is an IPv4 or IPv6 address in text (what a record may name as a pod's address).
bool IsIpAddress(const std::string& s);

}  // namespace cryo
