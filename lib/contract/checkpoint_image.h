#pragma once

// Checkpoint images: an OCI image whose single layer holds a kubelet checkpoint archive's files
// (config.dump, spec.dump, checkpoint/, rootfs-diff.tar, ... and for cryo's archives
// cryo-manifest.json), as Kubernetes documents it (buildah from scratch + add + an annotation)
// and as `checkpointctl build` makes it. Runtimes recognise one by an annotation of its
// manifest (containerd 2 reads org.criu.checkpoint.container.name, CRI-O its own
// io.kubernetes.cri-o.annotations.checkpoint.name), some builders put it in the config's labels
// instead.

#include <map>
#include <string>

namespace cryo::contract::checkpoint_image {

// Any of these, as a manifest annotation or a config label, marks a checkpoint image; the value
// is the checkpointed container's name.
inline constexpr const char* kNameKeys[] = {
    "org.criu.checkpoint.container.name",
    "io.kubernetes.cri-o.annotations.checkpoint.name",
};

// The image the checkpointed container ran (the archive's config.dump says the same, and wins).
inline constexpr const char* kRootfsImageNameKeys[] = {
    "org.criu.checkpoint.rootfsImageName",
};

// The value of the first of `keys` in `annotations`, then in `labels`; empty when none.
template <size_t N>
std::string Find(const char* const (&keys)[N],
                 const std::map<std::string, std::string>& annotations,
                 const std::map<std::string, std::string>& labels) {
  for (const auto* m : {&annotations, &labels}) {
    for (const char* k : keys) {
      auto it = m->find(k);
      if (it != m->end() && !it->second.empty()) return it->second;
    }
  }
  return "";
}

}  // namespace cryo::contract::checkpoint_image
