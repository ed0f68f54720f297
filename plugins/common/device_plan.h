#pragma once

// Vendor-neutral restore planning: which GPU of this node each checkpointed GPU goes to, and
// whether that GPU can take it (same chip, enough free memory). Refusals happen here, before
// any process or GPU is touched.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace cryo::gpu {

// Checkpointed GPU UUID -> GPU UUID on this node (the same alias as cryod's GpuManager uses;
// plugins see only the ABI, never the daemon's headers).
using DeviceMap = std::map<std::string, std::string>;

struct CheckpointedGpu {
  std::string uuid;
  std::string name;
  std::string chip;
  // Device memory the job held on it (all its processes); unknown when the driver did not say.
  std::optional<uint64_t> need_bytes;
};

struct NodeGpu {
  std::string uuid;
  std::string name;
  std::string chip;
  std::optional<uint64_t> free_bytes;
};

// The GPUs a checkpoint's plugin section lists under "devices" (both vendors write them the
// same way: uuid, name, chip, memory_used_bytes); entries without a uuid, or of the wrong type,
// are passed over. Never throws.
std::vector<CheckpointedGpu> CheckpointedGpus(const nlohmann::json& section);

// Resolves a *_VISIBLE_DEVICES value against `base` (the GPUs it is relative to, in order):
// entries are indexes into base or UUIDs (unique prefixes allowed); "all" is all of base; ""
// "none" and "void" are none. As CUDA does, the list ends at the first entry that names no GPU.
// MIG devices are refused (the driver cannot checkpoint them).
absl::StatusOr<std::vector<std::string>> ResolveVisibleDevices(
    absl::string_view value, const std::vector<std::string>& base);

// Plans the map. `requested` (explicit, from the user) must cover every checkpointed GPU and
// name GPUs of this node. Otherwise: onto `allowed` in order when given (the devices the
// restored job may use); else the same GPUs when all are present; else onto the node's GPUs
// in order. Then checks every pair. Two checkpointed GPUs never share a target.
absl::StatusOr<DeviceMap> PlanDeviceMap(const std::vector<CheckpointedGpu>& checkpointed,
                                        const std::vector<NodeGpu>& node,
                                        const std::optional<std::vector<std::string>>& allowed,
                                        const DeviceMap& requested);

}  // namespace cryo::gpu
