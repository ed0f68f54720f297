#pragma once

// What people read: sizes, ages and aligned tables, the same in the cryo CLI and the kubectl
// plugin.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cryo::human {

// 512 -> "512 B", 1.5 GiB -> "1.5 GiB", 300 MiB -> "300 MiB" (one decimal below 10).
std::string Bytes(uint64_t n);
// A checkpoint's size, and how much of it earlier checkpoints hold (incremental GPU data):
// "32 GiB" or "32 GiB (31 GiB referenced)".
std::string SizeCell(uint64_t size, uint64_t referenced);
// kubectl's AGE column: "59s", "90m", "5h", "3d".
std::string Age(absl::Duration d);
// A time as manifests and the API write it (RFC 3339, a checkpoint's created_at); InfinitePast
// when it is not one.
absl::Time ParseRfc3339(absl::string_view s);
// Rows with columns aligned, three spaces between them (kubectl's spacing).
std::string Table(const std::vector<std::vector<std::string>>& rows);
// "64Mi", "1Gi", "512MiB", "8388608" (bytes): Kubernetes' quantities and plain numbers.
absl::Status ParseSize(absl::string_view s, uint64_t* bytes);
// Control characters (a name from a shared store, say) shown as escapes, never raw.
std::string Printable(const std::string& s);

}  // namespace cryo::human
