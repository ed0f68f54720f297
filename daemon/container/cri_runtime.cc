#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/container/runtime.h"
#include "lib/base/grpc_status.h"
#include "lib/base/json.h"
#include "lib/base/status.h"
#include "lib/cri/cri_api.h"
#include "lib/cri/verbose_info.h"

namespace cryo::runtime {
namespace {

namespace cri = ::runtime::v1;

// The OCI spec is the large part; a runtime has no reason to send more.

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  return Annotate(cryo::FromGrpc(s), what);
}

ContainerInfo::State FromCri(cri::ContainerState s) {
  switch (s) {
    case cri::CONTAINER_CREATED:
      return ContainerInfo::State::kCreated;
    case cri::CONTAINER_RUNNING:
      return ContainerInfo::State::kRunning;
    case cri::CONTAINER_EXITED:
      return ContainerInfo::State::kExited;
    default:
      return ContainerInfo::State::kUnknown;
  }
}

class CriRuntime final : public ContainerRuntime {
 public:
  CriRuntime(std::string endpoint, absl::Duration timeout)
      : endpoint_(std::move(endpoint)),
        timeout_(timeout),
        channel_(grpc::CreateChannel(endpoint_, grpc::InsecureChannelCredentials())),
        stub_(cri::RuntimeService::NewStub(channel_)) {}

  std::string endpoint() const override { return endpoint_; }

  std::string name() const override {
    cri::VersionRequest req;
    cri::VersionResponse resp;
    // Only for logs and NodeInfo: a runtime that is down must not hold anyone up.
    auto ctx = Context(std::min(timeout_, absl::Seconds(2)));
    if (!stub_->Version(ctx.get(), req, &resp).ok()) return "unreachable";
    return absl::StrCat(resp.runtime_name(), " ", resp.runtime_version());
  }

  absl::StatusOr<ContainerInfo> Inspect(const std::string& id) override {
    if (id.empty()) return absl::InvalidArgumentError("container id is empty");
    cri::ContainerStatusRequest req;
    req.set_container_id(id);
    req.set_verbose(true);
    cri::ContainerStatusResponse resp;
    auto ctx = Context();
    grpc::Status s = stub_->ContainerStatus(ctx.get(), req, &resp);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
        (s.error_code() == grpc::StatusCode::UNKNOWN &&
         absl::StrContains(s.error_message(), "not found"))) {
      return absl::NotFoundError(
          absl::StrCat("no container '", id, "' in the runtime at ", endpoint_));
    }
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      return absl::UnavailableError(
          absl::StrCat("container runtime at ", endpoint_, " is unreachable: ", s.error_message()));
    }
    if (!s.ok()) return FromGrpc(s, absl::StrCat("ContainerStatus(", id, ")"));
    const cri::ContainerStatus& st = resp.status();
    ContainerInfo c;
    c.id = st.id();
    c.name = st.metadata().name();
    c.state = FromCri(st.state());
    c.exit_code = st.exit_code();
    c.image = st.image().image();
    c.image_ref = st.image_ref();
    c.labels = {st.labels().begin(), st.labels().end()};
    c.annotations = {st.annotations().begin(), st.annotations().end()};
    c.log_path = st.log_path();
    c.created_at_ns = st.created_at();
    // containerd and CRI-O both put a JSON object under "info" with the init pid, the sandbox
    // and the OCI spec.
    auto it = resp.info().find("info");
    if (it != resp.info().end()) {
      CRYO_RETURN_IF_ERROR(Annotate(ParseVerboseInfo(it->second, &c),
                                    absl::StrCat("ContainerStatus(", id, ") info")));
    }
    if (c.state != ContainerInfo::State::kRunning) c.pid = 0;
    return c;
  }

  absl::StatusOr<std::vector<ContainerInfo>> ListRunning() override {
    cri::ListContainersRequest req;
    req.mutable_filter()->mutable_state()->set_state(cri::CONTAINER_RUNNING);
    cri::ListContainersResponse resp;
    auto ctx = Context();
    grpc::Status s = stub_->ListContainers(ctx.get(), req, &resp);
    if (!s.ok()) return FromGrpc(s, absl::StrCat("ListContainers at ", endpoint_));
    std::vector<ContainerInfo> out;
    for (const auto& k : resp.containers()) {
      ContainerInfo c;
      c.id = k.id();
      c.name = k.metadata().name();
      c.pod_sandbox_id = k.pod_sandbox_id();
      c.state = FromCri(k.state());
      c.image = k.image().image();
      c.image_ref = k.image_ref();
      c.labels = {k.labels().begin(), k.labels().end()};
      c.annotations = {k.annotations().begin(), k.annotations().end()};
      c.created_at_ns = k.created_at();
      out.push_back(std::move(c));
    }
    return out;
  }

 private:
  std::unique_ptr<grpc::ClientContext> Context(
      absl::Duration timeout = absl::ZeroDuration()) const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(
        absl::ToChronoTime(absl::Now() + (timeout > absl::ZeroDuration() ? timeout : timeout_)));
    return ctx;
  }

  std::string endpoint_;
  absl::Duration timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<cri::RuntimeService::Stub> stub_;
};

}  // namespace

absl::Status ParseVerboseInfo(absl::string_view info, ContainerInfo* c) {
  CRYO_ASSIGN_OR_RETURN(nlohmann::json j, json::Parse(info, kCriVerboseInfoLimits));
  if (!j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  json::Fields f(j, "info");
  CRYO_RETURN_IF_ERROR(f.Int("pid", &c->pid));
  CRYO_RETURN_IF_ERROR(f.Str("sandboxID", &c->pod_sandbox_id));
  CRYO_ASSIGN_OR_RETURN(const nlohmann::json* spec, f.Object("runtimeSpec"));
  if (spec != nullptr) c->runtime_spec = *spec;
  return absl::OkStatus();
}

const char* StateName(ContainerInfo::State s) {
  switch (s) {
    case ContainerInfo::State::kCreated:
      return "created";
    case ContainerInfo::State::kRunning:
      return "running";
    case ContainerInfo::State::kExited:
      return "exited";
    default:
      return "unknown";
  }
}

absl::StatusOr<std::unique_ptr<ContainerRuntime>> ConnectCri(const std::string& endpoint,
                                                             absl::Duration call_timeout) {
  absl::string_view path = endpoint;
  if (!absl::ConsumePrefix(&path, "unix://")) absl::ConsumePrefix(&path, "unix:");
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "runtime endpoint '", endpoint, "' is not a unix socket (unix:///path or /path)"));
  }
  return std::unique_ptr<ContainerRuntime>(
      new CriRuntime(absl::StrCat("unix://", path), call_timeout));
}

}  // namespace cryo::runtime
