#pragma once

// Filesystem helpers with the durability the store needs: atomic replace (write temp, fsync,
// rename, fsync dir) and explicit modes (images hold process memory: 0700 dirs, 0600 files).

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/base/fd.h"

namespace cryo::fs {

absl::StatusOr<std::string> ReadFile(const std::string& path);
// What a write must outlive: a power loss (fsynced, file and directory) or only the crash of
// the process that wrote it (the page cache holds it; no wait behind other writers of the disk).
enum class Durability { kPowerLoss, kProcessCrash };
// Writes `data` to `path` atomically: readers see the old file or the whole new one.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view data, mode_t mode = 0600,
                             Durability durability = Durability::kPowerLoss);
// mkdir -p with `mode` for every directory it creates.
absl::Status MakeDirs(const std::string& path, mode_t mode = 0700);
// rm -rf; a missing path is fine.
absl::Status RemoveTree(const std::string& path);
absl::Status FsyncPath(const std::string& path);
bool Exists(const std::string& path);
bool IsDir(const std::string& path);

struct Entry {
  std::string name;
  bool is_dir = false;  // a real directory; a link to one is not
};
absl::StatusOr<std::vector<Entry>> ListDir(const std::string& path);
// Names in a directory (no "." or ".."), unsorted; empty when it cannot be read.
std::vector<std::string> ListNames(const std::string& path);

// Every regular file under `root`, as paths relative to it, sorted.
absl::StatusOr<std::vector<std::string>> ListFilesRecursive(const std::string& root);
// Sum of the sizes of the regular files under `root` (best effort, for progress).
uint64_t TreeBytes(const std::string& root);
absl::StatusOr<uint64_t> FreeBytes(const std::string& path);
// Applies 0700 to directories and 0600 to files under root (CRIU creates 0644 images).
absl::Status RestrictModes(const std::string& root);

std::string Join(absl::string_view a, absl::string_view b);

// Opens `rel` below the directory `root` without following any symbolic link (in `rel` or at
// its end) and without leaving `root` (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), and
// only if it is a regular file: what a shared store holds is opened this way, so that a planted
// link or FIFO can neither leak another file nor hang a reader. FAILED_PRECONDITION names what
// it found instead; NOT_FOUND when it is not there. `flags` are added to O_RDONLY|O_CLOEXEC.
absl::StatusOr<UniqueFd> OpenRegularBeneath(const std::string& root, const std::string& rel,
                                            int flags = 0);
// `fd` if it is open on a regular file, made blocking again (opened O_NONBLOCK so that a planted
// FIFO could not hang the open); FAILED_PRECONDITION "`display` is not a regular file" otherwise.
absl::StatusOr<UniqueFd> KeepRegular(UniqueFd fd, const std::string& display);
// ReadFile through OpenRegularBeneath, refusing files larger than `max_bytes`.
absl::StatusOr<std::string> ReadRegularBeneath(const std::string& root, const std::string& rel,
                                               uint64_t max_bytes);
// Reads the regular file open at `fd` (and closes it), refusing more than `max_bytes` (checked
// on its size before reading, and again while reading). `display` names it in errors.
absl::StatusOr<std::string> ReadOpenFile(UniqueFd fd, const std::string& display,
                                         uint64_t max_bytes);
// A small file handed to cryod (a token, a certificate: a Secret's file), `what` naming it in
// errors: links followed (a Secret's files are links into its data directory), opened
// non-blocking and only if a regular file, so a planted FIFO cannot hang the reader
// (FAILED_PRECONDITION), at most `max_bytes`.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, const std::string& what,
                                            uint64_t max_bytes);

// Opens the directory `rel` below `root` ("" for root itself) as OpenRegularBeneath opens files:
// no symbolic link followed, nothing outside root. FAILED_PRECONDITION for a link or something
// that is not a directory, NOT_FOUND when absent.
absl::StatusOr<UniqueFd> OpenDirBeneath(const std::string& root, const std::string& rel);
// The entries of the directory open at `dirfd` (left open), sorted by name.
absl::StatusOr<std::vector<Entry>> ListDirAt(int dirfd, const std::string& display);
// rm -rf of `name` in the directory open at `dirfd`: a link met anywhere below is removed
// itself, never followed, and every directory is entered relative to its parent's descriptor,
// so nothing outside `dirfd` can be reached. A missing name is fine.
absl::Status RemoveTreeAt(int dirfd, const std::string& name, const std::string& display);
// RemoveTreeAt of `rel` below `root`, its parent directories opened with OpenDirBeneath: what a
// shared store holds is removed this way, so that a planted link cannot make root delete
// anything outside the store.
absl::Status RemoveTreeBeneath(const std::string& root, const std::string& rel);

// Moves `from` to `to` only if `to` does not exist (renameat2 RENAME_NOREPLACE).
absl::Status RenameNoReplace(const std::string& from, const std::string& to);

}  // namespace cryo::fs
