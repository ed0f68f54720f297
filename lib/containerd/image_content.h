// Images as containerd stores them, read through its native API (images and content services,
// proto/containerd/v1) on the runtime's socket: what a checkpoint image is made of. CRI shows an
// image's config but neither its manifest's annotations nor its layers, which is where a
// checkpoint image (lib/contract/checkpoint_image.h) keeps its marks and its files.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace grpc {
class Channel;
}

namespace cryo::containerd {

// CRI's namespace in containerd.
inline constexpr char kCriNamespace[] = "k8s.io";

struct Blob {
  std::string media_type;
  std::string digest;  // "sha256:<hex>"
  int64_t size = 0;
};

// One image, as far as cryo reads it.
struct ImageManifest {
  std::string name;  // the containerd image name it was found under
  Blob manifest;     // the OCI (or Docker v2) manifest for this platform
  // The index's annotations (when the image's target is an index) and then the manifest's,
  // which win.
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> config_labels;  // the image config's Labels
  std::vector<Blob> layers;
};

class ImageContent {
 public:
  virtual ~ImageContent() = default;
  // The first of `names` containerd knows. NOT_FOUND when it knows none; UNIMPLEMENTED when the
  // runtime does not serve containerd's API (CRI-O); DATA_LOSS for a manifest that is not one.
  virtual absl::StatusOr<ImageManifest> Manifest(const std::vector<std::string>& names,
                                                 absl::Time deadline) = 0;
  // Streams a blob to `sink` in order; the sink's error ends the read.
  virtual absl::Status ReadBlob(const Blob& blob, absl::Time deadline,
                                const std::function<absl::Status(absl::string_view)>& sink) = 0;
};

// containerd's API on `channel`, in namespace `ns`.
std::unique_ptr<ImageContent> NewImageContent(std::shared_ptr<grpc::Channel> channel,
                                              std::string ns = kCriNamespace);

// The same on a unix socket endpoint ("unix:///path" or "/path"); connects lazily.
absl::StatusOr<std::unique_ptr<ImageContent>> ConnectImageContent(absl::string_view endpoint,
                                                                  std::string ns = kCriNamespace);

// Reads one manifest, index or config blob through `read` (small JSON blobs only) and fills `m`
// from the image's `target`: for an index, its annotations and the manifest for this machine's
// platform (or its only one). Pure (tests give `read` from memory).
absl::Status FillManifest(const Blob& target,
                          const std::function<absl::StatusOr<std::string>(const Blob&)>& read,
                          ImageManifest* m);

}  // namespace cryo::containerd
