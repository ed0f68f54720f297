#include "e2e/containerd/cri_client.h"

#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace cryo::e2e {

CriClient::CriClient(const std::string& socket_path) : socket_path_(socket_path) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);  // kubelet's limit
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(absl::StrCat("unix://", socket_path),
                                       grpc::InsecureChannelCredentials(), args);
  runtime_ = cri::RuntimeService::NewStub(channel_);
  images_ = cri::ImageService::NewStub(channel_);
}

std::pair<grpc::Status, std::string> CriClient::RawUnary(const std::string& method,
                                                         const std::string& request,
                                                         absl::Duration timeout) {
  grpc::GenericStub stub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1);
  grpc::ByteBuffer resp;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp,
                 [&done](grpc::Status st) { done.set_value(std::move(st)); });
  grpc::Status st = done.get_future().get();
  std::string out;
  if (st.ok()) {
    std::vector<grpc::Slice> slices;
    if (resp.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices)
        out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return {st, out};
}

absl::StatusOr<std::string> CriClient::RunPodSandbox(const cri::PodSandboxConfig& config) {
  cri::RunPodSandboxRequest req;
  *req.mutable_config() = config;
  cri::RunPodSandboxResponse resp;
  grpc::Status st =
      Call(*runtime_, &cri::RuntimeService::Stub::RunPodSandbox, req, &resp, absl::Minutes(2));
  if (!st.ok()) return FromGrpc(st);
  return resp.pod_sandbox_id();
}

absl::StatusOr<std::string> CriClient::CreateContainer(const std::string& pod_id,
                                                       const cri::ContainerConfig& config,
                                                       const cri::PodSandboxConfig& pod_config) {
  cri::CreateContainerRequest req;
  req.set_pod_sandbox_id(pod_id);
  *req.mutable_config() = config;
  *req.mutable_sandbox_config() = pod_config;
  cri::CreateContainerResponse resp;
  grpc::Status st =
      Call(*runtime_, &cri::RuntimeService::Stub::CreateContainer, req, &resp, absl::Minutes(2));
  if (!st.ok()) return FromGrpc(st);
  return resp.container_id();
}

absl::Status CriClient::StartContainer(const std::string& id) {
  cri::StartContainerRequest req;
  req.set_container_id(id);
  cri::StartContainerResponse resp;
  return FromGrpc(
      Call(*runtime_, &cri::RuntimeService::Stub::StartContainer, req, &resp, absl::Minutes(2)));
}

absl::Status CriClient::StopContainer(const std::string& id, int64_t timeout_s) {
  cri::StopContainerRequest req;
  req.set_container_id(id);
  req.set_timeout(timeout_s);
  cri::StopContainerResponse resp;
  return FromGrpc(Call(*runtime_, &cri::RuntimeService::Stub::StopContainer, req, &resp,
                       absl::Seconds(timeout_s) + absl::Minutes(1)));
}

absl::Status CriClient::RemoveContainer(const std::string& id) {
  cri::RemoveContainerRequest req;
  req.set_container_id(id);
  cri::RemoveContainerResponse resp;
  return FromGrpc(Call(*runtime_, &cri::RuntimeService::Stub::RemoveContainer, req, &resp));
}

absl::Status CriClient::StopPodSandbox(const std::string& id) {
  cri::StopPodSandboxRequest req;
  req.set_pod_sandbox_id(id);
  cri::StopPodSandboxResponse resp;
  return FromGrpc(
      Call(*runtime_, &cri::RuntimeService::Stub::StopPodSandbox, req, &resp, absl::Minutes(1)));
}

absl::Status CriClient::RemovePodSandbox(const std::string& id) {
  cri::RemovePodSandboxRequest req;
  req.set_pod_sandbox_id(id);
  cri::RemovePodSandboxResponse resp;
  return FromGrpc(
      Call(*runtime_, &cri::RuntimeService::Stub::RemovePodSandbox, req, &resp, absl::Minutes(1)));
}

absl::StatusOr<cri::ContainerStatus> CriClient::ContainerStatus(const std::string& id) {
  cri::ContainerStatusRequest req;
  req.set_container_id(id);
  cri::ContainerStatusResponse resp;
  grpc::Status st = Call(*runtime_, &cri::RuntimeService::Stub::ContainerStatus, req, &resp);
  if (!st.ok()) return FromGrpc(st);
  return resp.status();
}

absl::StatusOr<cri::ContainerStatus> CriClient::WaitContainer(
    const std::string& id, const std::function<bool(const cri::ContainerStatus&)>& pred,
    absl::Duration timeout) {
  absl::StatusOr<cri::ContainerStatus> last = absl::UnknownError("not polled");
  WaitUntil(
      [&] {
        last = ContainerStatus(id);
        return last.ok() && pred(*last);
      },
      timeout);
  return last;
}

cri::PodSandboxConfig MakePodConfig(const std::string& name, const std::string& uid,
                                    const std::string& log_directory,
                                    const std::string& cgroup_parent) {
  cri::PodSandboxConfig c;
  c.mutable_metadata()->set_name(name);
  c.mutable_metadata()->set_uid(uid);
  c.mutable_metadata()->set_namespace_("cryo-e2e");
  c.mutable_metadata()->set_attempt(0);
  c.set_hostname("");  // host network: must be empty on containerd 1.6
  c.set_log_directory(log_directory);
  (*c.mutable_labels())["io.kubernetes.pod.name"] = name;
  (*c.mutable_labels())["io.kubernetes.pod.namespace"] = "cryo-e2e";
  (*c.mutable_labels())["io.kubernetes.pod.uid"] = uid;
  (*c.mutable_annotations())["kubernetes.io/config.source"] = "api";
  auto* linux = c.mutable_linux();
  linux->set_cgroup_parent(cgroup_parent);
  auto* ns = linux->mutable_security_context()->mutable_namespace_options();
  ns->set_network(cri::NODE);
  ns->set_pid(cri::CONTAINER);
  ns->set_ipc(cri::POD);
  return c;
}

cri::ContainerConfig MakeContainerConfig(const std::string& name,
                                         const std::vector<std::string>& command) {
  cri::ContainerConfig c;
  c.mutable_metadata()->set_name(name);
  c.mutable_metadata()->set_attempt(0);
  c.mutable_image()->set_image(kBusyboxImage);
  for (const std::string& part : command) c.add_command(part);
  c.set_log_path(absl::StrCat(name, ".log"));
  (*c.mutable_labels())["io.kubernetes.container.name"] = name;
  (*c.mutable_annotations())["io.kubernetes.container.restartCount"] = "0";
  auto* env = c.add_envs();
  env->set_key("CRYO_E2E");
  env->set_value("1");
  auto* ns = c.mutable_linux()->mutable_security_context()->mutable_namespace_options();
  ns->set_network(cri::NODE);
  ns->set_pid(cri::CONTAINER);
  ns->set_ipc(cri::POD);
  return c;
}

bool WaitUntil(const std::function<bool()>& pred, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (pred()) return true;
    if (absl::Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

absl::StatusOr<std::vector<LogLine>> ReadCriLog(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<LogLine> lines;
  std::string partial_stream;
  std::string partial;
  std::string raw;
  while (std::getline(in, raw)) {
    // "<RFC3339Nano time> <stream> <P|F> <text>"
    std::vector<std::string> f = absl::StrSplit(raw, absl::MaxSplits(' ', 3));
    if (f.size() < 3) return absl::DataLossError(absl::StrCat("bad CRI log line: ", raw));
    std::string text = f.size() == 4 ? f[3] : "";
    if (f[2] == "P") {
      partial_stream = f[1];
      partial += text;
      continue;
    }
    lines.push_back({f[1], partial + text});
    partial.clear();
  }
  return lines;
}

}  // namespace cryo::e2e
