// CheckpointContainer (kubelet's checkpoint API).
//
// To come: resolve the container through the runtime (ContainerStatus verbose: pid, cgroup,
// namespaces), have cryod checkpoint it GPU-aware and publish it to the store, then write the
// archive kubelet asked for at request.location() in the format checkpointctl reads. containerd
// 1.6/1.7 answer Unimplemented, so the shim will never forward this call once that works.
#include "cri-shim/handlers/handlers.h"

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
    return ForwardUnchanged{};
  }

 private:
  HandlerDeps deps_;
};

}  // namespace

std::unique_ptr<OwnedMethod> NewCheckpointContainerHandler(const HandlerDeps& deps) {
  return std::make_unique<CheckpointContainerHandler>(deps);
}

}  // namespace cryo::shim
