// The CRI calls cryo-cri-shim owns, one source file each. Today each of them forwards; the
// comments in each file say what it will do once cryod's container mode lands (issue 4).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cri-shim/owned_method.h"

namespace cryo::shim {

// What owned handlers need from the rest of the node.
struct HandlerDeps {
  std::string cryod_socket;  // not dialled yet
};

std::unique_ptr<OwnedMethod> NewCheckpointContainerHandler(const HandlerDeps& deps);
std::unique_ptr<OwnedMethod> NewStopContainerHandler(const HandlerDeps& deps);
std::unique_ptr<OwnedMethod> NewCreateContainerHandler(const HandlerDeps& deps);
std::unique_ptr<OwnedMethod> NewStartContainerHandler(const HandlerDeps& deps);

// All of the above.
absl::StatusOr<OwnedMethods> DefaultOwnedMethods(const HandlerDeps& deps);

}  // namespace cryo::shim
