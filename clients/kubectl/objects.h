#pragma once

// What the plugin computes from Kubernetes objects and cryod's checkpoints, without any I/O:
// container choice, cryo pods, merged checkpoint lists, the resume pod and workload patch,
// and the human formats. Everything here is unit-tested directly.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/contract/annotations.h"
#include "lib/contract/labels.h"
#include "nlohmann/json.hpp"

namespace cryo::kubectl {

using nlohmann::json;

// Label and annotation names come from lib/contract (labels.h: kubelet's container labels
// that cryo copies onto checkpoints, and the chart's cryod pod selector; annotations.h: the
// pod annotations the shim reads). Only what the plugin alone uses is named here.
// The port through which the API server's pod proxy reaches cryod's HTTP API.
inline constexpr char kCryodPortName[] = "http";
inline constexpr int kDefaultCryodPort = 9464;
// Removed by `kubectl annotate --local` as its no-op when converting a file to JSON; nobody
// sets it, and a resume pod never carries it.
inline constexpr char kNoopAnnotation[] = "kubectl-cryo.cryo.dev/none";
// cryod's read-only HTTP API (daemon/api/http_api.h).
inline constexpr char kCryodCheckpointsPath[] = "/v1/checkpoints";

// The string at `pointer` ("/spec/nodeName"), or "" when absent or not a string.
std::string Str(const json& j, const std::string& pointer);
// A number, or the decimal string protobuf's JSON uses for 64-bit fields; 0 otherwise.
uint64_t U64(const json& v);

// The container to checkpoint: `wanted` when given (must exist), else the only one, else the
// pod's kubectl.kubernetes.io/default-container. Errors name the pod's containers.
absl::StatusOr<std::string> PickContainer(const json& pod, const std::string& wanted);
// Why the container is not running ("waiting: CrashLoopBackOff"), or "" when it runs.
std::string NotRunningReason(const json& pod, const std::string& container);

struct CryoPod {
  std::string name;
  std::string node;
  std::string phase;
  int port = 0;              // cryod's port named "http"; 0 when the pod declares none
  bool running = false;      // phase Running: cryod can answer through the pod proxy
  std::string token_secret;  // the Secret with its HTTP API's token (kCryodApiTokenSecret)
};
// The cryo pods of a PodList, with cryod's port (the port named "http" of container "cryod",
// else of any container).
std::vector<CryoPod> CryoPodsFromList(const json& pod_list);

// The names of the nodes of a NodeList whose Ready condition is True, sorted.
std::vector<std::string> ReadyNodes(const json& node_list);

// Where cryod's HTTP API is reached through the API server (--cryo-endpoint, $CRYO_ENDPOINT).
struct CryodEndpoint {
  enum Kind {
    kPods,   // "pods": the cryo DaemonSet's pods, through the pod proxy (the default)
    kNodes,  // "nodes[:PORT]": a host service on every node, through the node proxy
  };
  Kind kind = kPods;
  int port = kDefaultCryodPort;  // kNodes only
  std::string ToString() const;
};
absl::StatusOr<CryodEndpoint> ParseCryodEndpoint(const std::string& s);

// Where a checkpoint was taken, from its labels ("" when it has none).
struct PodRef {
  std::string namespace_name;
  std::string pod;
  std::string container;
  std::string ToString() const;  // "ns/pod/container", "-" when unknown
};
PodRef SourceOf(const json& checkpoint);

// The checkpoints in `list` (cryod's /v1/checkpoints array) whose labels name `ref`'s
// namespace, pod and container. One labelled with another pod uid than `uid` (when both are
// known) is of an earlier pod of the same name, and is left out.
std::vector<json> CheckpointsOf(const json& list, const PodRef& ref, const std::string& uid);

// Checkpoint arrays from several cryods merged by checkpoint_id (nodes may share a store),
// newest first.
json MergeCheckpoints(const std::vector<json>& lists);

struct ResumePodOptions {
  std::string checkpoint_id;
  std::string name;            // "" -> <source>-r-<random>
  std::string node;            // "" -> the scheduler picks
  std::string namespace_name;  // "" -> the source's
  std::string container;       // the checkpointed container ("" when unknown)
  std::string prefix = contract::kDefaultPrefix;
};
// A new Pod that resumes `source` (a Pod, or a workload with spec.template) from a checkpoint:
// its labels and annotations minus those controllers and the server set, the resume
// annotation, and its spec without the node binding and fields only the server may set.
absl::StatusOr<json> BuildResumePod(const json& source, const ResumePodOptions& o);

// The annotations that make cryo resume a container from `id`.
json ResumeAnnotations(const std::string& prefix, const std::string& id,
                       const std::string& container);

// "job/train", "deploy/web", "statefulsets.apps/db" -> the kubectl resource and name.
struct WorkloadRef {
  std::string resource;  // "job", "deployment" or "statefulset"
  std::string name;
};
absl::StatusOr<WorkloadRef> ParseWorkload(const std::string& s);
// JSON merge patch putting the resume annotations on the workload's pod template.
json WorkloadResumePatch(const std::string& prefix, const std::string& id,
                         const std::string& container);

// The kind of `resource` as kubectl -o name prints it: "job.batch", "deployment.apps".
std::string QualifiedKind(const std::string& resource);

// kubectl's shape of a list of things that are not one API kind: {"apiVersion": "v1",
// "kind": "List", "items": [...], "metadata": {"resourceVersion": ""}}.
json KubeList(const json& items);

// `j` as YAML (block style, two-space indent, sequences under a key not indented, as kubectl
// prints). Strings are plain where no YAML reader could take them for anything else (a number,
// a boolean, a date, null) and double-quoted otherwise.
std::string ToYaml(const json& j);

}  // namespace cryo::kubectl
