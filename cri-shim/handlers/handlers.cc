#include "cri-shim/handlers/handlers.h"

namespace cryo::shim {

absl::StatusOr<OwnedMethods> DefaultOwnedMethods(const HandlerDeps& deps) {
  if (deps.cryod == nullptr)
    return absl::InvalidArgumentError("owned handlers need a cryod client");
  OwnedMethods methods;
  for (auto* factory : {&NewCheckpointContainerHandler, &NewStopContainerHandler,
                        &NewCreateContainerHandler, &NewStartContainerHandler}) {
    if (absl::Status st = methods.Add(factory(deps)); !st.ok()) return st;
  }
  return methods;
}

}  // namespace cryo::shim
