// CreateContainer: where opted-in containers get cryo-init.
//
// To come: for a pod that opted in (annotations in request.sandbox_config()), mount cryo-init
// read-only into the container and make it the entrypoint with the original command and args
// behind it; for a container that is to resume, also tell cryo-init (environment) which
// checkpoint to have cryod restore. The modified request is sent through
// ctx.runtime().runtime().CreateContainer with ctx.NewRuntimeContext(). Other pods are
// forwarded unchanged, byte for byte.
#include "cri-shim/handlers/handlers.h"

namespace cryo::shim {
namespace {

class CreateContainerHandler final : public UnaryOwnedMethod<runtime::v1::CreateContainerRequest,
                                                             runtime::v1::CreateContainerResponse> {
 public:
  explicit CreateContainerHandler(const HandlerDeps& deps)
      : UnaryOwnedMethod("/runtime.v1.RuntimeService/CreateContainer"), deps_(deps) {}

 protected:
  Result HandleRequest(CallContext& ctx, const Request& request) override {
    return ForwardUnchanged{};
  }

 private:
  HandlerDeps deps_;
};

}  // namespace

std::unique_ptr<OwnedMethod> NewCreateContainerHandler(const HandlerDeps& deps) {
  return std::make_unique<CreateContainerHandler>(deps);
}

}  // namespace cryo::shim
