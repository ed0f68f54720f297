// StopContainer: the preemption path.
//
// To come: if the container runs and its pod opted in to checkpoint-on-stop, checkpoint it
// through cryod first, bounded by request.timeout() (the grace period) and the call's deadline;
// then forward the stop unchanged. A checkpoint that cannot finish in time is abandoned (cryod
// rolls back), recorded (log, metric, a reason kubelet can show) and the stop proceeds. An
// exited container is never checkpointed.
#include "cri-shim/handlers/handlers.h"

namespace cryo::shim {
namespace {

class StopContainerHandler final : public UnaryOwnedMethod<runtime::v1::StopContainerRequest,
                                                           runtime::v1::StopContainerResponse> {
 public:
  explicit StopContainerHandler(const HandlerDeps& deps)
      : UnaryOwnedMethod("/runtime.v1.RuntimeService/StopContainer"), deps_(deps) {}

 protected:
  Result HandleRequest(CallContext& ctx, const Request& request) override {
    return ForwardUnchanged{};
  }

 private:
  HandlerDeps deps_;
};

}  // namespace

std::unique_ptr<OwnedMethod> NewStopContainerHandler(const HandlerDeps& deps) {
  return std::make_unique<StopContainerHandler>(deps);
}

}  // namespace cryo::shim
