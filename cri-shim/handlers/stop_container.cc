// StopContainer: the preemption path. A running container whose pod asked for
// checkpoint-on-stop is checkpointed through cryod first, within the stop's grace period; then
// the stop goes to the runtime unchanged. A checkpoint that fails leaves the job as it was
// (cryod rolls back); one that runs out of time is not waited for, and cryod, seeing the call's
// deadline gone, publishes nothing and resumes the job for the stop to end. Both are recorded:
// log, metric, and a line in the container's log, which `kubectl logs --previous` shows. A
// checkpoint that cryod predicts will not fit is not taken when the workload has a periodic one
// to resume from: cryod ends the job and answers with that checkpoint (docs/operations.md).
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

// Kept back from the grace period for the stop itself.
constexpr absl::Duration kStopMargin = absl::Seconds(1);

// The longest a stop waits for the runtime to see the exit of a job cryod ended.
constexpr absl::Duration kMaxExitWait = absl::Seconds(5);

// kubelet never stops a container with less (pkg/kubelet/kuberuntime: minimumGracePeriodInSeconds).
constexpr int64_t kKubeletMinimumGrace = 2;

// How the stop's grace compares with the pod's terminationGracePeriodSeconds (kubelet's
// annotation on the container): the pod's own (preemption, delete, drain, a liveness restart),
// shortened (a delete or eviction with --grace-period, soft eviction, node shutdown's share) or
// kubelet's minimum (force delete, hard eviction).
std::string StopGrace(const runtime::v1::ContainerStatus& c, int64_t timeout) {
  int64_t pod = -1;
  if (auto it = c.annotations().find(contract::k8s::kPodTerminationGracePeriod);
      it == c.annotations().end() || !absl::SimpleAtoi(it->second, &pod) || pod < 0) {
    return "unknown";
  }
  if (timeout >= pod) return "pod";
  return timeout <= kKubeletMinimumGrace ? "minimum" : "shortened";
}

class StopContainerHandler final : public UnaryOwnedMethod<runtime::v1::StopContainerRequest,
                                                           runtime::v1::StopContainerResponse> {
 public:
  explicit StopContainerHandler(const HandlerDeps& deps)
      : UnaryOwnedMethod("/runtime.v1.RuntimeService/StopContainer"), deps_(deps) {}

 protected:
  Result HandleRequest(CallContext& ctx, const Request& request) override {
    if (request.container_id().empty()) return ForwardUnchanged{};  // the runtime says why
    auto st = ContainerStatusOf(ctx, request.container_id(), true);
    if (!st.ok()) return ForwardUnchanged{};
    const runtime::v1::ContainerStatus& c = st->status();
    ManagedKeys keys(deps_.annotation_prefix);
    auto on_stop = c.annotations().find(keys.checkpoint_on_stop);
    if (on_stop == c.annotations().end() || on_stop->second != "true") return ForwardUnchanged{};
    // An exited container has nothing left to save.
    if (c.state() != runtime::v1::CONTAINER_RUNNING) return ForwardUnchanged{};
    const std::string name = absl::StrCat(c.metadata().name(), " (", c.id().substr(0, 13), ")");
    const int init_pid = InitPid(*st);
    absl::Duration budget =
        std::min(absl::Seconds(request.timeout()), TimeLeft(ctx, absl::InfiniteDuration())) -
        kStopMargin;
    // kubelet never asks for less than 2 s (a force delete is a 2 s stop): the pod's or the
    // shim's minimum grace decides which short stops are not worth a checkpoint.
    int min_grace = deps_.checkpoint_min_grace_s;
    if (auto it = c.annotations().find(
            contract::Key(deps_.annotation_prefix, contract::container::kCheckpointMinGrace));
        it != c.annotations().end()) {
      (void)absl::SimpleAtoi(it->second, &min_grace);
    }
    const bool below_min = request.timeout() < min_grace;
    if (below_min || budget < absl::Seconds(1)) {
      CRYO_LOG(Warning) << "stop of " << name << " with " << request.timeout() << " s grace: "
                        << (below_min ? absl::StrCat("below the minimum of ", min_grace, " s")
                                      : "no time")
                        << " to checkpoint it";
      if (deps_.metrics)
        deps_.metrics->ContainerOperation("checkpoint_on_stop", "skipped").Increment();
      WriteToContainerLog(init_pid,
                          below_min ? "cryo: stopped without a checkpoint: the stop's grace period "
                                      "is below the pod's minimum for one"
                                    : "cryo: stopped without a checkpoint: the stop gave no time "
                                      "for one (grace period too short)");
      return ForwardUnchanged{};
    }
    // A member of a job of several pods: the job is checkpointed, every member at one cut
    // (issue 37); the job cannot run on without this one, so every member ends with it.
    if (auto job =
            c.annotations().find(contract::Key(deps_.annotation_prefix, contract::container::kJob));
        job != c.annotations().end() && !job->second.empty()) {
      CheckpointJobAtStop(ctx, request, c, name, init_pid, budget, job->second);
      return ForwardUnchanged{};
    }
    v1::CheckpointRequest req;
    req.set_container_id(c.id());
    req.set_leave_running(false);  // the job ends with its checkpoint, as the stop wants
    // cryod first predicts whether the checkpoint fits the time left; when it will not and the
    // workload has a good checkpoint (a periodic one), it ends the job without one.
    req.set_plan(true);
    req.set_workload(WorkloadOf(c, deps_.annotation_prefix));
    // Validated when the container was created; a value changed since is the user's to see.
    if (absl::Status s = SetCriuOptions(c, deps_.annotation_prefix, &req); !s.ok()) {
      CRYO_LOG(Warning) << "stop of " << name << ": " << s << "; node defaults used";
      req.clear_criu();
    }
    // CRI does not say why kubelet stops a container (preemption, eviction, deletion, drain,
    // node shutdown, a failed liveness probe): "stop" is what the shim knows. The grace it gave,
    // against the pod's own, tells a little more (docs/containers.md has the table).
    for (const auto& [k, v] :
         CheckpointLabels(c, deps_.annotation_prefix, contract::label::kReasonStop)) {
      (*req.mutable_labels())[k] = v;
    }
    (*req.mutable_labels())[contract::Key(deps_.annotation_prefix,
                                          contract::label::kStopGraceSeconds)] =
        absl::StrCat(request.timeout());
    (*req.mutable_labels())[contract::Key(deps_.annotation_prefix, contract::label::kStopGrace)] =
        StopGrace(c, request.timeout());
    const absl::Time t0 = absl::Now();
    auto r = deps_.cryod->Checkpoint(req, t0 + budget);
    if (r.ok() && !r->not_taken().empty()) {
      // cryod ended the job and said why in its log; its cryo-init wrote the termination
      // message.
      CRYO_LOG(Warning) << "stop of " << name << ": " << r->not_taken();
      if (deps_.metrics) {
        deps_.metrics->ContainerOperation("checkpoint_on_stop", "fell_back").Increment();
      }
    } else if (r.ok()) {
      CRYO_LOG(Info) << "checkpointed " << name << " before its stop as " << r->checkpoint_id()
                     << " in " << absl::FormatDuration(absl::Now() - t0);
      if (deps_.metrics) deps_.metrics->ContainerOperation("checkpoint_on_stop", "ok").Increment();
    } else {
      CRYO_LOG(Warning) << "checkpoint of " << name
                        << " before its stop failed: " << r.status().ToString()
                        << "; stopping it anyway";
      if (deps_.metrics) {
        deps_.metrics->ContainerOperation("checkpoint_on_stop", "failed").Increment();
      }
      WriteToContainerLog(
          init_pid, absl::StrCat("cryo: checkpoint before stop failed: ", r.status().message()));
    }
    if (r.ok()) AwaitExit(ctx, request.container_id());
    return ForwardUnchanged{};
  }

  // The job checkpoint of the job `c` is a member of, every member ending with it, planned as
  // a container's is. The stopped member's CRIU options go to every member (one pod template,
  // as JobSet and PyTorchJob make them).
  void CheckpointJobAtStop(CallContext& ctx, const Request& request,
                           const runtime::v1::ContainerStatus& c, const std::string& name,
                           int init_pid, absl::Duration budget, const std::string& job) {
    const std::string& p = deps_.annotation_prefix;
    v1::CheckpointJobRequest jr = JobRequestOf(c, p, job);
    v1::CheckpointRequest* d = jr.mutable_member_defaults();
    d->set_leave_running(false);
    if (absl::Status s = SetCriuOptions(c, p, d); !s.ok()) {
      CRYO_LOG(Warning) << "stop of " << name << ": " << s << "; node defaults used";
      d->clear_criu();
    }
    // The reason and the stop's grace; each member's own pod labels come from its container.
    (*d->mutable_labels())[contract::Key(p, contract::label::kReason)] =
        contract::label::kReasonStop;
    (*d->mutable_labels())[contract::Key(p, contract::label::kStopGraceSeconds)] =
        absl::StrCat(request.timeout());
    (*d->mutable_labels())[contract::Key(p, contract::label::kStopGrace)] =
        StopGrace(c, request.timeout());
    // Planned: when it will not fit and the job has a committed job checkpoint, none is taken
    // and the replacements resume from that one.
    jr.set_plan(true);
    const std::string what = absl::StrCat("job ", jr.namespace_(), "/", job);
    const absl::Time t0 = absl::Now();
    auto r = deps_.cryod->CheckpointJob(jr, t0 + budget);
    if (r.ok() && !r->not_taken().empty()) {
      CRYO_LOG(Warning) << "stop of " << name << " (" << what << "): " << r->not_taken();
      if (deps_.metrics) {
        deps_.metrics->ContainerOperation("checkpoint_on_stop", "fell_back").Increment();
      }
      WriteToContainerLog(init_pid, absl::StrCat("cryo: ", what, " ", r->not_taken()));
      return;
    }
    if (r.ok()) {
      CRYO_LOG(Info) << "checkpointed " << what << " (" << r->parts_size()
                     << " members) before the stop of its member " << name << " as "
                     << r->job_checkpoint_id() << " in " << absl::FormatDuration(absl::Now() - t0);
      if (deps_.metrics) deps_.metrics->ContainerOperation("checkpoint_on_stop", "ok").Increment();
      AwaitExit(ctx, request.container_id());
      return;
    }
    CRYO_LOG(Warning) << "checkpoint of " << what << " before the stop of its member " << name
                      << " failed: " << r.status().ToString() << "; stopping it anyway";
    if (deps_.metrics) {
      deps_.metrics->ContainerOperation("checkpoint_on_stop", "failed").Increment();
    }
    WriteToContainerLog(init_pid, absl::StrCat("cryo: checkpoint of ", what,
                                               " before stop failed: ", r.status().message()));
  }

  // cryod ended the job: the stop goes on once the runtime has seen the exit, where it is a
  // no-op. Forwarded while containerd 1.6 is still handling the exit, its kill can reach a task
  // shim that is going away and fail the stop ("ttrpc: closed"; seen in the e2e under load),
  // which kubelet reports and retries. Bounded by kMaxExitWait and the call's time.
  static void AwaitExit(CallContext& ctx, const std::string& id) {
    const absl::Time end = absl::Now() + std::min(kMaxExitWait, TimeLeft(ctx, kMaxExitWait));
    while (absl::Now() < end) {
      auto st = ContainerStatusOf(ctx, id, false);
      if (!st.ok() || st->status().state() != runtime::v1::CONTAINER_RUNNING) return;
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

 private:
  HandlerDeps deps_;
};

}  // namespace

std::unique_ptr<OwnedMethod> NewStopContainerHandler(const HandlerDeps& deps) {
  return std::make_unique<StopContainerHandler>(deps);
}

}  // namespace cryo::shim
