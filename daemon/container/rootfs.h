#pragma once

// A container's writable layer: what it changed in its image's filesystem. With overlayfs (the
// default snapshotter of containerd and CRI-O's storage) that is the upper directory: new and
// changed files as they are, deletions as whiteouts (0/0 character devices), replaced
// directories marked opaque. cryo saves it as the pair checkpointctl knows: rootfs-diff.tar
// (what to write) and deleted.files (a JSON array of paths to remove first).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/base/fd.h"

namespace cryo::container {

struct MountEntry {
  std::string root;         // path within the mounted filesystem
  std::string mount_point;  // as the process sees it
  std::string fstype;
  std::string source;
  std::string super_options;
};

// Parses /proc/<pid>/mountinfo.
absl::StatusOr<std::vector<MountEntry>> ParseMountInfo(absl::string_view text);

// The overlay upper directory of the mount at "/", or FAILED_PRECONDITION saying what the root
// is instead.
absl::StatusOr<std::string> OverlayUpperDir(const std::vector<MountEntry>& mounts);

// Mount points below "/" (relative, no leading '/'): bind-mounted files such as /etc/hosts and
// volumes are not part of the writable layer, and the empty files or directories the runtime
// created in it to mount them on must not travel either.
std::vector<std::string> MountPointsBelowRoot(const std::vector<MountEntry>& mounts);

struct RootfsDiff {
  uint64_t tar_bytes = 0;
  int entries = 0;                   // files, directories, links in the tar
  std::vector<std::string> deleted;  // relative paths, removed before the tar is unpacked
};

// Writes the diff of `upper` to tar_path and deleted_path (0600). Paths in `excluded` (and
// everything below them) are left out.
absl::StatusOr<RootfsDiff> WriteRootfsDiff(const std::string& upper,
                                           const std::vector<std::string>& excluded,
                                           const std::string& tar_path,
                                           const std::string& deleted_path);

// deleted.files is a JSON array of relative paths, at most this large.
inline constexpr size_t kMaxDeletedFilesBytes = 16u << 20;
// INVALID_ARGUMENT for anything but a bounded JSON array of safe relative paths.
absl::StatusOr<std::vector<std::string>> ParseDeletedFiles(absl::string_view json);

// Opens `name` in the directory open at `dir_fd` for reading without following a link, and only
// if it is a regular file (a FIFO planted there must not hang the restore). FAILED_PRECONDITION
// names what it found instead; NOT_FOUND when it is absent.
absl::StatusOr<UniqueFd> OpenDiffFile(int dir_fd, const char* name);
// deleted.files read and parsed from the directory open at `dir_fd` (OpenDiffFile, at most
// kMaxDeletedFilesBytes); an absent file is an empty list.
absl::StatusOr<std::vector<std::string>> ReadDeletedFiles(int dir_fd, const char* name);

// Applies a diff below `root`: removes the deleted paths, then unpacks the tar (owners, modes,
// times and extended attributes kept; never through a symlink or "..", so a hostile image
// cannot write outside `root`). cryo-nsexec runs it with root "/" inside the container's mount
// namespace, so absolute links resolve in the container.
absl::Status ApplyRootfsDiff(const std::string& root, int tar_fd,
                             const std::vector<std::string>& deleted);

}  // namespace cryo::container
