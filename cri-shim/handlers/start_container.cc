// StartContainer: the restore path.
//
// To come: for a container created to resume, forward the start (cryo-init comes up as PID 1 and
// waits), then have cryod restore the job into the container's namespaces and cgroup; a restore
// that fails surfaces as a failed start with a clear reason. Other containers are forwarded
// unchanged.
#include "cri-shim/handlers/handlers.h"

namespace cryo::shim {
namespace {

class StartContainerHandler final : public UnaryOwnedMethod<runtime::v1::StartContainerRequest,
                                                            runtime::v1::StartContainerResponse> {
 public:
  explicit StartContainerHandler(const HandlerDeps& deps)
      : UnaryOwnedMethod("/runtime.v1.RuntimeService/StartContainer"), deps_(deps) {}

 protected:
  Result HandleRequest(CallContext& ctx, const Request& request) override {
    return ForwardUnchanged{};
  }

 private:
  HandlerDeps deps_;
};

}  // namespace

std::unique_ptr<OwnedMethod> NewStartContainerHandler(const HandlerDeps& deps) {
  return std::make_unique<StartContainerHandler>(deps);
}

}  // namespace cryo::shim
