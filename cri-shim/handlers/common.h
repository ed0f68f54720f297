// Helpers the owned handlers share.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "cri-shim/owned_method.h"
#include "cryo/v1/cryo.pb.h"
#include "lib/base/grpc_status.h"
#include "lib/cri/cri_api.h"

namespace cryo::shim {

// ContainerStatus from the runtime on behalf of this call (verbose: with the init pid).
absl::StatusOr<runtime::v1::ContainerStatusResponse> ContainerStatusOf(CallContext& ctx,
                                                                       const std::string& id,
                                                                       bool verbose);

// The init pid from a verbose ContainerStatus (containerd and CRI-O put it in info["info"]).
int InitPid(const runtime::v1::ContainerStatusResponse& r);

// Labels a container checkpoint carries: the pod's namespace, name and uid and the container
// name (kubelet's own labels on the container), and why it was taken.
std::map<std::string, std::string> CheckpointLabels(const runtime::v1::ContainerStatus& c,
                                                    const std::string& prefix,
                                                    const std::string& reason);

// The container's workload key: what the shim recorded at creation, else the default key from
// kubelet's labels (containers created before the shim, or of pods that did not opt in).
std::string WorkloadOf(const runtime::v1::ContainerStatus& c, const std::string& prefix);

// The pod's CRIU options (copied onto the container at creation, lib/contract/criu_annotations.h)
// into the request; unset ones are left to cryod's node defaults.
absl::Status SetCriuOptions(const runtime::v1::ContainerStatus& c, const std::string& prefix,
                            v1::CheckpointRequest* req);

// The job checkpoint of the job `job` that member container `c` belongs to: its namespace
// (kubelet's label), its name and its size as the shim recorded it (0 when it did not); the
// members found by cryod (none listed).
v1::CheckpointJobRequest JobRequestOf(const runtime::v1::ContainerStatus& c,
                                      const std::string& prefix, const std::string& job);

// Best effort: a line in the container's log (its PID 1's stderr), where `kubectl logs` shows it.
void WriteToContainerLog(int init_pid, const std::string& line);

// How long a call may still take: until its deadline, or `fallback` without one.
absl::Duration TimeLeft(const CallContext& ctx, absl::Duration fallback);

}  // namespace cryo::shim
