// CheckpointContainer (kubelet's checkpoint API): containerd 1.6/1.7 answer Unimplemented, so
// the shim never forwards it. cryod checkpoints the container (GPU-aware, leave running),
// publishes it to the store and writes the archive kubelet asked for at request.location().
// A member of a job of several pods takes its whole job, every member at one cut; the archive
// is its own part.
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cri-shim/handlers/common.h"
#include "cri-shim/handlers/handlers.h"
#include "cri-shim/metrics.h"
#include "cri-shim/opt_in.h"
#include "lib/base/log.h"
#include "lib/contract/annotations.h"
#include "lib/contract/job.h"
#include "lib/contract/labels.h"

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
    absl::Duration budget =
        request.timeout() > 0 ? absl::Seconds(request.timeout()) : TimeLeft(ctx, absl::Minutes(30));
    // A member of a job of several pods: the whole job at one cut (issue 37), every member
    // running on; the archive is this member's part.
    if (auto job =
            c.annotations().find(contract::Key(deps_.annotation_prefix, contract::container::kJob));
        job != c.annotations().end() && !job->second.empty()) {
      return CheckpointJob(request, c, job->second, budget);
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
  Result CheckpointJob(const Request& request, const runtime::v1::ContainerStatus& c,
                       const std::string& job, absl::Duration budget) {
    const std::string& p = deps_.annotation_prefix;
    v1::CheckpointJobRequest jr = JobRequestOf(c, p, job);
    v1::CheckpointRequest* d = jr.mutable_member_defaults();
    d->set_leave_running(true);
    d->set_export_archive(request.location());
    jr.set_export_container(c.id());
    if (absl::Status s = SetCriuOptions(c, p, d); !s.ok()) return s;
    (*d->mutable_labels())[contract::Key(p, contract::label::kReason)] = "checkpoint-api";
    const std::string what = absl::StrCat("job ", jr.namespace_(), "/", job);
    auto r = deps_.cryod->CheckpointJob(jr, absl::Now() + budget);
    if (deps_.metrics) {
      deps_.metrics->ContainerOperation("checkpoint_api", r.ok() ? "ok" : "failed").Increment();
    }
    if (!r.ok()) {
      CRYO_LOG(Warning) << "CheckpointContainer " << c.id().substr(0, 13) << " (" << what
                        << "): " << r.status().ToString();
      return absl::Status(r.status().code(),
                          absl::StrCat("checkpointing container ", c.metadata().name(), " with ",
                                       what, ": ", r.status().message()));
    }
    CRYO_LOG(Info) << "checkpointed " << what << " (" << r->parts_size() << " members) as "
                   << r->job_checkpoint_id() << " for kubelet's checkpoint of container "
                   << c.metadata().name() << " (" << c.id().substr(0, 13) << ")"
                   << (request.location().empty() ? ""
                                                  : absl::StrCat(", archive ", request.location()));
    return Response{};
  }

  HandlerDeps deps_;
};

}  // namespace

std::unique_ptr<OwnedMethod> NewCheckpointContainerHandler(const HandlerDeps& deps) {
  return std::make_unique<CheckpointContainerHandler>(deps);
}

}  // namespace cryo::shim
