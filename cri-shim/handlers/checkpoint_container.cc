// CheckpointContainer (kubelet's checkpoint API): containerd 1.6/1.7 answer Unimplemented, so
// the shim never forwards it. cryod checkpoints the container (GPU-aware, leave running),
// publishes it to the store and writes the archive kubelet asked for at request.location().
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cri-shim/handlers/common.h"
#include "cri-shim/handlers/handlers.h"
#include "cri-shim/metrics.h"
#include "cri-shim/opt_in.h"
#include "lib/base/log.h"

namespace cryo::shim {
namespace {

class CheckpointContainerHandler final
    : public UnaryOwnedMethod<runtime::v1::CheckpointContainerRequest,
                              runtime::v1::CheckpointContainerResponse> {
 public:
  explicit CheckpointContainerHandler(const HandlerDeps& deps)
      : UnaryOwnedMethod("/runtime.v1.RuntimeService/CheckpointContainer"), deps_(deps) {}

 protected:
  Result HandleRequest(CallContext& ctx, const Request& request) override {
    if (request.container_id().empty()) {
      return absl::InvalidArgumentError("CheckpointContainer: container_id is required");
    }
    auto st = ContainerStatusOf(ctx, request.container_id(), false);
    if (!st.ok()) {
      if (absl::IsNotFound(st.status()) || absl::StrContains(st.status().message(), "not found")) {
        return absl::NotFoundError(
            absl::StrCat("CheckpointContainer: no container '", request.container_id(), "'"));
      }
      return st.status();
    }
    const runtime::v1::ContainerStatus& c = st->status();
    if (c.state() != runtime::v1::CONTAINER_RUNNING) {
      return absl::FailedPreconditionError(
          absl::StrCat("CheckpointContainer: container ", c.metadata().name(), " (",
                       c.id().substr(0, 13), ") is not running",
                       c.state() == runtime::v1::CONTAINER_EXITED
                           ? absl::StrCat(" (exited with code ", c.exit_code(), ")")
                           : ""));
    }
    v1::CheckpointRequest req;
    req.set_container_id(c.id());
    req.set_leave_running(true);  // kubelet's checkpoint is a copy: the container runs on
    req.set_export_archive(request.location());
    req.set_workload(WorkloadOf(c, deps_.annotation_prefix));
    if (absl::Status s = SetCriuOptions(c, deps_.annotation_prefix, &req); !s.ok()) return s;
    for (const auto& [k, v] : CheckpointLabels(c, deps_.annotation_prefix, "checkpoint-api")) {
      (*req.mutable_labels())[k] = v;
    }
    absl::Duration budget =
        request.timeout() > 0 ? absl::Seconds(request.timeout()) : TimeLeft(ctx, absl::Minutes(30));
    auto r = deps_.cryod->Checkpoint(req, absl::Now() + budget);
    if (deps_.metrics) {
      deps_.metrics->ContainerOperation("checkpoint_api", r.ok() ? "ok" : "failed").Increment();
    }
    if (!r.ok()) {
      CRYO_LOG(Warning) << "CheckpointContainer " << c.id().substr(0, 13) << ": "
                        << r.status().ToString();
      return absl::Status(r.status().code(),
                          absl::StrCat("checkpointing container ", c.metadata().name(), ": ",
                                       r.status().message()));
    }
    CRYO_LOG(Info) << "checkpointed container " << c.metadata().name() << " ("
                   << c.id().substr(0, 13) << ") as " << r->checkpoint_id()
                   << (request.location().empty() ? ""
                                                  : absl::StrCat(", archive ", request.location()));
    return Response{};
  }

 private:
  HandlerDeps deps_;
};

}  // namespace

std::unique_ptr<OwnedMethod> NewCheckpointContainerHandler(const HandlerDeps& deps) {
  return std::make_unique<CheckpointContainerHandler>(deps);
}

}  // namespace cryo::shim
