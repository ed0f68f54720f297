#pragma once

// CRIU options of one pod, as annotations under the cryo prefix (default "cryo.dev"):
//   <prefix>/criu-tcp-established: "true" | "false"
//   <prefix>/criu-tcp-close:       "true" | "false"
//   <prefix>/criu-skip-in-flight:  "true" | "false"
//   <prefix>/criu-link-remap:      "true" | "false"
//   <prefix>/criu-ghost-limit:     a size: "64Mi", "1Gi", bytes
//   <prefix>/criu-ext-unix-sk:     "true" | "false"
// The shim copies them from the pod onto the containers it manages (and refuses a container
// whose pod gives a bad value); the shim and cryod read them from the container when they
// checkpoint it. Unset ones take the node's defaults.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cryo::contract {

// The largest ghost limit a node, a request or a pod may ask for: the contents of deleted files
// are copied into every checkpoint's images.
inline constexpr uint64_t kMaxCriuGhostLimit = 16ull << 30;

struct CriuAnnotations {
  std::optional<bool> tcp_established;
  std::optional<bool> tcp_close;
  std::optional<bool> skip_in_flight;
  std::optional<bool> link_remap;
  std::optional<uint64_t> ghost_limit;
  std::optional<bool> ext_unix_sk;
};

// The annotation keys (without prefix), in the order above.
const std::vector<std::string>& CriuAnnotationKeys();

// INVALID_ARGUMENT naming the annotation and what it wants (a ghost limit above
// kMaxCriuGhostLimit too: refused when the container is created, not at its first checkpoint).
absl::StatusOr<CriuAnnotations> ParseCriuAnnotations(
    const std::map<std::string, std::string>& annotations, const std::string& prefix);

}  // namespace cryo::contract
