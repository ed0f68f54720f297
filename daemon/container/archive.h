#pragma once

// Checkpoint archives in kubelet's format (what CRI-O writes for CheckpointContainer and
// checkpointctl and buildah read): an uncompressed tar with
//   config.dump      JSON: id, name, rootfsImageName, runtime, createdTime, checkpointedTime
//   spec.dump        the container's OCI runtime spec (JSON)
//   checkpoint/      CRIU's image files
//   rootfs-diff.tar  writable-layer changes
//   deleted.files    JSON array of paths deleted from the image
//   dump.log         CRIU's log of the dump
//   cryo/            cryo's other files (the GPU fast path's data), whole

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace cryo::container {

// A file of the checkpoint beyond CRIU's images, written whole at `name`: the chunks another
// checkpoint holds for it (an incremental checkpoint's holes) are read from that checkpoint's
// file at the same offsets.
struct ArchiveFile {
  std::string name;
  std::string path;
  uint64_t size = 0;
  uint64_t chunk = 0;                         // the size of the chunks in `elsewhere`
  std::map<uint64_t, std::string> elsewhere;  // chunk index -> the file that holds it
};

struct ArchiveInput {
  std::string images_dir;       // CRIU images
  std::string rootfs_diff_tar;  // empty: none
  std::string deleted_files;    // empty: none
  std::string dump_log;         // empty: none
  std::string stats_dump;       // CRIU's stats-dump; empty: none
  std::vector<ArchiveFile> files;
  // Small files written as they are (name in the archive -> contents).
  std::map<std::string, std::string> extra;
  nlohmann::json config_dump;
  nlohmann::json spec_dump;
};

// Writes the archive to `path` (0600) through a temporary name and a rename, so kubelet never
// sees half an archive. The parent directory is created (0700) when missing.
absl::Status WriteCheckpointArchive(const ArchiveInput& in, const std::string& path);

// Names of the entries of a tar archive, in order.
absl::StatusOr<std::vector<std::string>> ListArchive(const std::string& path);

// The content of one (small) entry; NOT_FOUND when the archive has none of that name.
absl::StatusOr<std::string> ReadArchiveFile(const std::string& path, const std::string& name);

}  // namespace cryo::container
