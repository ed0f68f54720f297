#pragma once

// Exit codes of kubectl-cryo: one per failure a script may want to tell apart. The code travels
// with the absl::Status as a payload, so any layer can decide it and main() reports it.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cryo::kubectl {

enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,           // anything not listed below
  kExitUsage = 2,           // bad flags or arguments
  kExitApiUnreachable = 3,  // kubectl could not reach the API server
  kExitUnauthorized = 4,    // the API server refused the user (401, 403)
  kExitPodNotFound = 5,
  kExitContainerNotFound = 6,  // no such container, or -c missing on a multi-container pod
  kExitContainerNotRunning = 7,
  kExitPodNotScheduled = 8,
  kExitNoCryo = 9,           // the node (or the cluster) runs no cryo pod
  kExitKubeletRefused = 10,  // kubelet's checkpoint API failed or is not enabled
  kExitCheckpointNotFound = 11,
  kExitSourcePodGone = 12,     // restore: the checkpoint's pod no longer exists
  kExitCryodFailed = 13,       // no cryod answered through the pod proxy
  kExitWorkloadNotFound = 14,  // restore --workload: no such Job/Deployment/StatefulSet
  kExitNotThroughCryo = 15,    // kubelet checkpointed, but not through cryo's shim
  kExitKubectlMissing = 127,   // kubectl itself could not be run
};

// A status carrying `code` (and an absl code that fits it).
absl::Status Failure(ExitCode code, absl::string_view message);

// The exit code a status carries; kExitError when it carries none, kExitOk for OK.
int ExitCodeOf(const absl::Status& s);

// A 404 of the API server (or of what it proxies to) as KubectlStatus reports it: NOT_FOUND
// without an exit code. A Failure() never counts, whatever its absl code: "kubectl is missing"
// once read as "no such object" made every command report the cluster as running no cryo.
bool IsApiNotFound(const absl::Status& s);

// The same status with context prepended to its message, payload kept.
absl::Status WithContext(const absl::Status& s, absl::string_view context);

}  // namespace cryo::kubectl
