#pragma once

// The node's container runtime (containerd or CRI-O), as cryod sees it: enough to find a
// container's processes and facts. An interface so the engine's container flows are tested
// with a fake; CriRuntime talks CRI v1 to the runtime's socket.

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace cryo::runtime {

struct ContainerInfo {
  std::string id;
  std::string name;  // CRI metadata name (the pod spec's container name)
  std::string pod_sandbox_id;
  enum class State { kCreated, kRunning, kExited, kUnknown } state = State::kUnknown;
  int exit_code = 0;
  pid_t pid = 0;          // host pid of the container's PID 1; 0 unless running
  std::string image;      // image as asked for (e.g. docker.io/library/busybox:1)
  std::string image_ref;  // what it resolved to (digest or id)
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::string log_path;
  int64_t created_at_ns = 0;
  nlohmann::json runtime_spec;  // the OCI spec, when the runtime reports it (verbose status)
};

const char* StateName(ContainerInfo::State s);

// Reads the JSON the runtime puts under "info" in a verbose ContainerStatus (containerd and
// CRI-O both): the init pid, the sandbox and the OCI spec. INVALID_ARGUMENT for JSON that is not
// an object, nests too deeply or has a field of the wrong type; never throws.
absl::Status ParseVerboseInfo(absl::string_view info, ContainerInfo* c);

class ContainerRuntime {
 public:
  virtual ~ContainerRuntime() = default;
  // NOT_FOUND for an unknown id; UNAVAILABLE when the runtime cannot be reached.
  virtual absl::StatusOr<ContainerInfo> Inspect(const std::string& id) = 0;
  // Running containers (no pid or spec: Inspect each for those).
  virtual absl::StatusOr<std::vector<ContainerInfo>> ListRunning() = 0;
  // "containerd 1.6.20", "cri-o 1.28.1", ...
  virtual std::string name() const = 0;
  virtual std::string endpoint() const = 0;
};

// Connects to a CRI runtime at `endpoint` (unix:///path or /path). Fails only on a malformed
// endpoint; an unreachable runtime shows up per call, so cryod starts before the runtime does.
absl::StatusOr<std::unique_ptr<ContainerRuntime>> ConnectCri(const std::string& endpoint,
                                                             absl::Duration call_timeout);

}  // namespace cryo::runtime
