#pragma once

// Restoring from a checkpoint image (lib/contract/checkpoint_image.h): its layer is a cryo
// kubelet archive, whose cryo-manifest.json lists every file with its size and checksum. The
// layer is streamed from the runtime's content store into a staging directory in the store's
// own layout (checkpoint/ -> images/, rootfs-diff.tar and deleted.files -> container/), and
// every file is checked against that manifest before the checkpoint exists for anyone.

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/store/manifest.h"
#include "lib/containerd/image_content.h"

namespace cryo::container {

// Where a file of the archive goes in a checkpoint directory; empty for files cryo does not
// restore from (config.dump, spec.dump, dump.log, stats-dump, status, status.dump).
std::string StorePathOfArchiveFile(const std::string& archive_path);
// The reverse: where a file of a checkpoint directory goes in the archive (cryo's own files,
// the GPU fast path's data, below cryo/).
std::string ArchivePathOfStoreFile(const std::string& store_path);

struct UnpackedImage {
  store::Manifest manifest;  // cryo-manifest.json, its file paths as the store names them
  std::string rootfs_image;  // config.dump's rootfsImageName (empty: none)
};

// What an import may write: a checkpoint image is built by whoever wrote the pod spec.
struct ImportLimits {
  uint64_t max_bytes = 0;  // what the files may add up to (the store's free space, less a reserve)
  size_t max_files = 65536;  // files written
  int max_depth = 16;        // directories below the checkpoint's
  // Asked for every entry and every MiB written: true stops the import (CANCELLED).
  std::function<bool()> stop;
  // Asked every kRoomEvery bytes written (with the bytes written so far): an error stops the
  // import with it. The store is shared with the node's checkpoints and other imports: its free
  // space is asked as it is now, not once at the start.
  std::function<absl::Status(uint64_t written)> room;
  static constexpr uint64_t kRoomEvery = 16ull << 20;
};

// Unpacks the layers of `image` into `dir` and verifies them: FAILED_PRECONDITION when the image
// holds no cryo-manifest.json (not made from a cryo archive) or is not of a container; DATA_LOSS
// when a file is missing, of another size or checksum, not listed in cryo-manifest.json, when
// cryo-manifest.json comes twice, or the layer holds anything but files and directories;
// RESOURCE_EXHAUSTED past `limits`.
absl::StatusOr<UnpackedImage> UnpackCheckpointImage(containerd::ImageContent& images,
                                                    const containerd::ImageManifest& image,
                                                    const std::string& dir, absl::Time deadline,
                                                    int verify_threads, const ImportLimits& limits);

}  // namespace cryo::container
