#pragma once

// The annotations cryo reads and writes, in one place for the shim, cryod and the kubectl
// plugin. Pods opt in with annotations under a prefix (default "cryo.dev", configurable on the
// shim and cryod); the shim copies its decision onto the container's own annotations at
// creation, so later calls (stop, start, checkpoint) need no pod lookup. Labels of checkpoints
// use the same prefix.

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cryo::contract {

inline constexpr char kDefaultPrefix[] = "cryo.dev";

// Pod annotations (set by the user).
namespace pod {
inline constexpr char kCheckpointOnStop[] = "checkpoint-on-stop";  // "true"
inline constexpr char kResume[] = "resume";                        // "auto" | "<checkpoint id>"
inline constexpr char kWorkload[] = "workload";                    // workload key override
inline constexpr char kContainers[] = "containers";                // "a,b": only these
// Exit code of a container stopped after its checkpoint (1..125; default the shim's).
inline constexpr char kCheckpointedExitCode[] = "checkpointed-exit-code";
// Stops that give less than this many seconds are not checkpointed ("3" skips force deletes,
// which kubelet turns into 2 s stops).
inline constexpr char kCheckpointMinGrace[] = "checkpoint-min-grace-seconds";
// "true": the job runs the GPU fast-path library (docs/gpu.md), which moves its device memory
// itself at checkpoint and restore.
inline constexpr char kGpuFastPath[] = "gpu-fast-path";
// How often cryod checkpoints the running job in the background ("20m", "1h30m"; "0" or "off":
// never, whatever the node's default). docs/operations.md, "Periodic checkpoints".
inline constexpr char kCheckpointEvery[] = "checkpoint-every";
}  // namespace pod

// Container annotations (set by the shim at CreateContainer).
namespace container {
inline constexpr char kManaged[] = "managed";                      // "true": under cryo-init
inline constexpr char kCheckpointOnStop[] = "checkpoint-on-stop";  // "true"
inline constexpr char kWorkloadKey[] = "workload-key";             // the workload key
inline constexpr char kResumeFrom[] = "resume-from";               // checkpoint id to restore
// Copied from the pod annotation of the same name.
inline constexpr char kCheckpointMinGrace[] = "checkpoint-min-grace-seconds";
// The checkpoint image the container was created from (Kubernetes' restore-from-image flow);
// the container itself runs the image the checkpoint was taken in.
inline constexpr char kCheckpointImage[] = "checkpoint-image";
// "true": the fast-path library is mounted and preloaded into the job.
inline constexpr char kGpuFastPath[] = "gpu-fast-path";
// The pod's checkpoint-every, checked and in seconds ("0": never).
inline constexpr char kCheckpointEvery[] = "checkpoint-every";
}  // namespace container

// Checkpoint labels cryo adds.
namespace label {
inline constexpr char kReason[] = "reason";  // why the checkpoint was taken
// Values of kReason that cryo sets itself.
inline constexpr char kReasonStop[] = "stop";                  // a stop (preemption, eviction)
inline constexpr char kReasonPeriodic[] = "periodic";          // cryod's background schedule
inline constexpr char kReasonNotice[] = "termination-notice";  // a cloud's notice
// Stop checkpoints: the grace period the stop gave (seconds), and how it compares with the
// pod's own terminationGracePeriodSeconds: "pod" (the same), "shortened" (less, above kubelet's
// 2 s floor), "minimum" (kubelet's 2 s floor: a force delete, a hard eviction) or "unknown".
inline constexpr char kStopGraceSeconds[] = "stop-grace-seconds";
inline constexpr char kStopGrace[] = "stop-grace";
// On a checkpoint imported from a checkpoint image: that image, and the checkpoint's id where it
// was taken.
inline constexpr char kSourceImage[] = "source-image";
inline constexpr char kSourceCheckpoint[] = "source-checkpoint";
}  // namespace label

// "<prefix>/<key>".
inline std::string Key(absl::string_view prefix, absl::string_view key) {
  return absl::StrCat(prefix, "/", key);
}

}  // namespace cryo::contract
