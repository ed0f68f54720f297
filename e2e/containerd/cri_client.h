// A CRI client that does what kubelet does, for the e2e tests and the benchmark: typed calls
// with deadlines, configs shaped like kubelet's, and raw calls by method name.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "lib/base/grpc_status.h"
#include "lib/cri/cri_api.h"

namespace cryo::e2e {

namespace cri = ::runtime::v1;

class CriClient {
 public:
  // socket_path: a unix socket (containerd's or the shim's).
  explicit CriClient(const std::string& socket_path);

  const std::string& socket_path() const { return socket_path_; }
  cri::RuntimeService::Stub& runtime() { return *runtime_; }
  cri::ImageService::Stub& images() { return *images_; }
  const std::shared_ptr<grpc::Channel>& channel() { return channel_; }

  // Calls stub method `fn` with a fresh context carrying `timeout`.
  template <class Stub, class Req, class Resp>
  grpc::Status Call(Stub& stub, grpc::Status (Stub::*fn)(grpc::ClientContext*, const Req&, Resp*),
                    const Req& req, Resp* resp, absl::Duration timeout = absl::Seconds(30)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return (stub.*fn)(&ctx, req, resp);
  }

  // Unary call of any method by full name with raw request bytes (the client side of "unknown
  // methods forward").
  std::pair<grpc::Status, std::string> RawUnary(const std::string& method,
                                                const std::string& request,
                                                absl::Duration timeout = absl::Seconds(30));

  // Convenience wrappers for the lifecycle kubelet drives.
  absl::StatusOr<std::string> RunPodSandbox(const cri::PodSandboxConfig& config);
  absl::StatusOr<std::string> CreateContainer(const std::string& pod_id,
                                              const cri::ContainerConfig& config,
                                              const cri::PodSandboxConfig& pod_config);
  absl::Status StartContainer(const std::string& id);
  absl::Status StopContainer(const std::string& id, int64_t timeout_s);
  absl::Status RemoveContainer(const std::string& id);
  absl::Status StopPodSandbox(const std::string& id);
  absl::Status RemovePodSandbox(const std::string& id);
  absl::StatusOr<cri::ContainerStatus> ContainerStatus(const std::string& id);

  // Polls ContainerStatus until pred holds or timeout; returns the last status.
  absl::StatusOr<cri::ContainerStatus> WaitContainer(
      const std::string& id, const std::function<bool(const cri::ContainerStatus&)>& pred,
      absl::Duration timeout = absl::Seconds(30));

 private:
  std::string socket_path_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<cri::RuntimeService::Stub> runtime_;
  std::unique_ptr<cri::ImageService::Stub> images_;
};

// A pod config as kubelet sends it for a host-network pod: empty hostname (containerd 1.6
// refuses one with host network), pid namespace per container.
cri::PodSandboxConfig MakePodConfig(const std::string& name, const std::string& uid,
                                    const std::string& log_directory,
                                    const std::string& cgroup_parent);

// A container config running `command` in the e2e busybox image, logging to
// <pod log dir>/<name>.log.
cri::ContainerConfig MakeContainerConfig(const std::string& name,
                                         const std::vector<std::string>& command);

// The e2e image (see node.sh).
inline constexpr char kBusyboxImage[] = "docker.io/cryo/busybox:e2e";

// Polls pred every 20 ms until it holds or timeout passes; returns its last value.
bool WaitUntil(const std::function<bool()>& pred, absl::Duration timeout);

// Lines of a CRI container log with their stream ("stdout"/"stderr") and text; timestamps and
// partial/full tags dropped (partial lines are joined).
struct LogLine {
  std::string stream;
  std::string text;
  bool operator==(const LogLine&) const = default;
};
absl::StatusOr<std::vector<LogLine>> ReadCriLog(const std::string& path);

}  // namespace cryo::e2e
