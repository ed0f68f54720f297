// StartContainer: the restore path. A container created to resume is started (its cryo-init
// comes up and waits), then cryod restores the job into it: its namespaces, cgroups, writable
// layer and log pipes. A failed restore is a failed start with the reason; cryod has told the
// waiting cryo-init, which exits, and written why to the container's log. Other containers
// are forwarded unchanged.
#include "absl/strings/str_cat.h"
#include "cri-shim/handlers/common.h"
#include "cri-shim/handlers/handlers.h"
#include "cri-shim/metrics.h"
#include "cri-shim/opt_in.h"
#include "lib/base/log.h"

namespace cryo::shim {
namespace {

// A restore of tens of GiB of GPU memory takes minutes; kubelet's own deadline is shorter, and
// when it passes the restore still finishes (kubelet then sees a running container).
constexpr absl::Duration kRestoreTimeout = absl::Minutes(30);

class StartContainerHandler final : public UnaryOwnedMethod<runtime::v1::StartContainerRequest,
                                                            runtime::v1::StartContainerResponse> {
 public:
  explicit StartContainerHandler(const HandlerDeps& deps)
      : UnaryOwnedMethod("/runtime.v1.RuntimeService/StartContainer"), deps_(deps) {}

 protected:
  Result HandleRequest(CallContext& ctx, const Request& request) override {
    if (request.container_id().empty()) return ForwardUnchanged{};
    auto st = ContainerStatusOf(ctx, request.container_id(), false);
    if (!st.ok()) return ForwardUnchanged{};
    const runtime::v1::ContainerStatus& c = st->status();
    auto from = c.annotations().find(ManagedKeys(deps_.annotation_prefix).resume_from);
    if (from == c.annotations().end() || from->second.empty()) return ForwardUnchanged{};
    const std::string name = absl::StrCat(c.metadata().name(), " (", c.id().substr(0, 13), ")");

    auto rctx = ctx.NewRuntimeContext();
    Response resp;
    grpc::Status s = ctx.runtime().runtime().StartContainer(rctx.get(), request, &resp);
    if (!s.ok()) return FromGrpc(s);

    v1::RestoreRequest req;
    req.set_checkpoint_id(from->second);
    req.set_container_id(c.id());
    const absl::Time t0 = absl::Now();
    auto r = deps_.cryod->Restore(req, t0 + kRestoreTimeout);
    if (deps_.metrics)
      deps_.metrics->ContainerOperation("restore", r.ok() ? "ok" : "failed").Increment();
    if (!r.ok()) {
      CRYO_LOG(Warning) << "restore of " << from->second << " into " << name
                        << " failed: " << r.status().ToString();
      if (absl::IsUnavailable(r.status())) {
        // cryod never saw the request, so nobody will tell cryo-init: end the container.
        runtime::v1::StopContainerRequest stop;
        stop.set_container_id(c.id());
        stop.set_timeout(0);
        runtime::v1::StopContainerResponse ignored;
        auto sctx = ctx.NewRuntimeContext();
        // The restore's failure is what the caller gets; a container that would not stop is
        // ended by kubelet's own stop of the failed start.
        (void)ctx.runtime().runtime().StopContainer(sctx.get(), stop, &ignored);
      }
      return absl::Status(r.status().code(),
                          absl::StrCat("resuming container ", name, " from checkpoint ",
                                       from->second, " failed: ", r.status().message()));
    }
    CRYO_LOG(Info) << "resumed " << name << " from checkpoint " << from->second << " in "
                   << absl::FormatDuration(absl::Now() - t0);
    return resp;
  }

 private:
  HandlerDeps deps_;
};

}  // namespace

std::unique_ptr<OwnedMethod> NewStartContainerHandler(const HandlerDeps& deps) {
  return std::make_unique<StartContainerHandler>(deps);
}

}  // namespace cryo::shim
