#pragma once

// What a restored job may hold besides its credentials (credentials.h): CRIU restores resource
// limits, the OOM score and every open file as its images say, with the privileges of the CRIU
// that restores. An image alone would so decide them: a raw socket in a pod without CAP_NET_RAW,
// a device node made from a "ghost" file, RLIMIT_NOFILE above the pod's. cryod reads them from
// the images before a restore (and after a dump) and bounds them by the same target as the
// credentials: the new container's cryo-init, or in process mode the job's own record. See
// docs/security.md, "Resources".

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/criu/credentials.h"
#include "lib/base/proc.h"

namespace cryo::criu {

// The hard limits of process `pid`, in RLIMIT_* order (/proc/<pid>/limits; RLIM_INFINITY for
// "unlimited").
absl::StatusOr<std::vector<uint64_t>> ReadLiveHardLimits(const proc::ProcReader& proc, pid_t pid);
// Parses the text of /proc/<pid>/limits (tests feed it by hand).
absl::StatusOr<std::vector<uint64_t>> ParseProcLimits(absl::string_view text);

// OK when what the images in `images_dir` would create stays within `ceiling` (its capability
// sets and hard limits); PERMISSION_DENIED naming the process or file and the resource
// otherwise:
//   - a hard limit above the ceiling's (when it records limits);
//   - a packet socket or a raw IP socket without CAP_NET_RAW in the ceiling's effective set;
//   - a netlink socket in multicast groups of a family that lets only CAP_NET_ADMIN listen, or a
//     tun/tap file, without CAP_NET_ADMIN;
//   - a deleted ("ghost") file that is a character or block device: CRIU would mknod it.
// INVALID_ARGUMENT for an image that does not parse.
absl::Status CheckImageResources(const std::string& images_dir, const CredentialCeiling& ceiling,
                                 absl::string_view ceiling_name);

// The lowest OOM score adjustment a restored process keeps: raises each of `pids` whose
// /proc/<pid>/oom_score_adj is below `floor` to it (CRIU restored the image's; a container's
// target is its cryo-init's, which the kubelet set for the pod). Returns the pids raised.
std::vector<pid_t> RaiseOomScoreAdj(const proc::ProcReader& proc, const std::vector<pid_t>& pids,
                                    int floor);

}  // namespace cryo::criu
