// The CRI calls cryo-cri-shim owns, one source file each. Containers of pods that did not opt
// in (see opt_in.h) pass through unchanged, byte for byte.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cri-shim/cryod_client.h"
#include "cri-shim/owned_method.h"
#include "lib/containerd/image_content.h"

namespace cryo::shim {

class ShimMetrics;

// What owned handlers need from the rest of the node.
struct HandlerDeps {
  std::string annotation_prefix = "cryo.dev";
  // Host path of cryo-init, bind-mounted read-only into opted-in containers.
  std::string init_path = "/usr/local/lib/cryo/cryo-init";
  // Host path of the GPU fast-path library, mounted and preloaded into the jobs of pods that ask
  // for it (annotation <prefix>/gpu-fast-path: "true").
  std::string fastpath_library = "/usr/local/lib/cryo/libcryo_gpu_fastpath.so";
  std::shared_ptr<Cryod> cryod;
  // Exit code of a container stopped after its checkpoint, unless its pod says otherwise.
  int checkpointed_exit_code = 75;
  // Stops giving less grace than this are not checkpointed, unless the pod says otherwise.
  int checkpoint_min_grace_s = 2;
  ShimMetrics* metrics = nullptr;  // may be null (tests)
  // The runtime's images as containerd stores them, to recognise checkpoint images; null: none
  // are recognised.
  std::shared_ptr<containerd::ImageContent> images;
};

std::unique_ptr<OwnedMethod> NewCheckpointContainerHandler(const HandlerDeps& deps);
std::unique_ptr<OwnedMethod> NewStopContainerHandler(const HandlerDeps& deps);
std::unique_ptr<OwnedMethod> NewCreateContainerHandler(const HandlerDeps& deps);
std::unique_ptr<OwnedMethod> NewStartContainerHandler(const HandlerDeps& deps);

// All of the above.
absl::StatusOr<OwnedMethods> DefaultOwnedMethods(const HandlerDeps& deps);

}  // namespace cryo::shim
