#pragma once

// The CRIU options cryo lets a node, a job or a container choose: typed, never raw arguments
// (a root daemon must not let a caller pass flags to CRIU). Each maps to CRIU's own option:
//
//   tcp_established  --tcp-established   dump and restore established TCP connections
//   tcp_close        --tcp-close         restore them closed instead (dump and restore)
//   skip_in_flight   --skip-in-flight    ignore connections still in a listener's queue
//   link_remap       --link-remap        an open file unlinked while another link remains
//   ghost_limit      --ghost-limit       largest deleted-but-open file carried in the images
//   ext_unix_sk      --ext-unix-sk       unix sockets connected outside the job (datagram)
//
// A checkpoint records the options it was taken with; its restore repeats those CRIU needs.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lib/contract/criu_annotations.h"
#include "nlohmann/json.hpp"

namespace cryo::criu {

// CRIU's own default ghost limit (1 MiB), and the most a node or request may ask for: the
// contents of deleted files are copied into the images.
inline constexpr uint64_t kCriuGhostLimit = 1ull << 20;
inline constexpr uint64_t kMaxGhostLimit = contract::kMaxCriuGhostLimit;

struct JobOptions {
  bool tcp_established = false;
  bool tcp_close = false;
  bool skip_in_flight = false;
  bool link_remap = false;
  uint64_t ghost_limit = 0;  // 0: CRIU's default
  bool ext_unix_sk = false;
  bool shell_job = false;

  // CRIU arguments for a dump or a restore of a job with these options.
  std::vector<std::string> DumpArgs() const;
  // `network_lock_held`: cryod holds the job's connections itself (a job checkpoint's members
  // restored together), so CRIU takes no lock of its own.
  std::vector<std::string> RestoreArgs(bool network_lock_held = false) const;

  bool operator==(const JobOptions&) const = default;
};

// What a request or a container's annotations ask for; unset fields take the node's default.
// One type with the pod annotations' (lib/contract), so that they carry over as they are.
using OptionOverrides = contract::CriuAnnotations;

// A node's defaults for every job (cryod's config). tcp_established "auto": on for containers
// with a network namespace of their own (nothing outside sees their connections), off otherwise.
struct NodeDefaults {
  enum class Tcp { kOff, kOn, kAuto };
  Tcp tcp_established = Tcp::kAuto;
  bool tcp_close = false;
  bool skip_in_flight = false;
  bool link_remap = true;
  uint64_t ghost_limit = 64ull << 20;  // NCCL's deleted /dev/shm segments are ~34 MB
  bool ext_unix_sk = false;
};

// The options a job is dumped with: the request's (or annotations') choices over the node's.
// INVALID_ARGUMENT for a ghost limit above kMaxGhostLimit.
absl::Status Resolve(const NodeDefaults& node, const OptionOverrides& asked, bool own_netns,
                     JobOptions* out);

}  // namespace cryo::criu
