#include "daemon/container/rootfs.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/base/fs.h"
#include "lib/base/json.h"
#include "lib/base/status.h"
#include "nlohmann/json.hpp"

namespace cryo::container {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string Relative(absl::string_view p) {
  while (absl::ConsumePrefix(&p, "/")) {
  }
  while (absl::ConsumeSuffix(&p, "/")) {
  }
  return std::string(p);
}

bool Excluded(const std::string& rel, const std::vector<std::string>& excluded) {
  for (const auto& e : excluded) {
    if (rel == e || absl::StartsWith(rel, e + "/")) return true;
  }
  return false;
}

// A relative path that stays below its root: no "..", no empty or "." components.
absl::Status CheckRelative(const std::string& p) {
  if (p.empty()) return absl::InvalidArgumentError("empty path in rootfs diff");
  for (absl::string_view c : absl::StrSplit(p, '/')) {
    if (c.empty() || c == "." || c == "..") {
      return absl::InvalidArgumentError(absl::StrCat("unsafe path in rootfs diff: '", p, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ArchiveError(struct archive* a, absl::string_view what) {
  const char* msg = archive_error_string(a);
  return absl::InternalError(absl::StrCat(what, ": ", msg ? msg : "unknown libarchive error"));
}

class DiffWriter {
 public:
  DiffWriter(std::string upper, const std::vector<std::string>& excluded)
      : upper_(std::move(upper)), excluded_(excluded) {}

  absl::StatusOr<RootfsDiff> Write(const std::string& tar_path) {
    out_ = archive_write_new();
    disk_ = archive_read_disk_new();
    auto cleanup = absl::MakeCleanup([this] {
      archive_write_free(out_);
      archive_read_free(disk_);
    });
    archive_read_disk_set_standard_lookup(disk_);
    archive_write_set_format_pax_restricted(out_);
    int fd = ::open(tar_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create ", tar_path));
    auto close_fd = absl::MakeCleanup([fd] { ::close(fd); });
    if (archive_write_open_fd(out_, fd) != ARCHIVE_OK) return ArchiveError(out_, tar_path);
    CRYO_RETURN_IF_ERROR(Walk(""));
    if (archive_write_close(out_) != ARCHIVE_OK) return ArchiveError(out_, tar_path);
    struct stat st;
    if (::fstat(fd, &st) == 0) diff_.tar_bytes = st.st_size;
    return diff_;
  }

 private:
  absl::Status Walk(const std::string& rel) {
    std::string dir = rel.empty() ? upper_ : fs::Join(upper_, rel);
    CRYO_ASSIGN_OR_RETURN(auto entries, fs::ListDir(dir));
    for (const auto& e : entries) {
      std::string child = rel.empty() ? e.name : absl::StrCat(rel, "/", e.name);
      if (Excluded(child, excluded_)) continue;
      std::string full = fs::Join(upper_, child);
      struct stat st;
      if (::lstat(full.c_str(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("lstat ", full));
      if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
        diff_.deleted.push_back(child);  // whiteout
        continue;
      }
      if (S_ISSOCK(st.st_mode)) continue;  // a socket file has nothing to carry
      if (S_ISDIR(st.st_mode)) {
        char v[4] = {0};
        if (::lgetxattr(full.c_str(), "trusted.overlay.opaque", v, sizeof(v)) > 0 && v[0] == 'y') {
          // Replaced directory: whatever the image had there goes first.
          diff_.deleted.push_back(child);
        }
      }
      CRYO_RETURN_IF_ERROR(Add(child, full, st));
      if (S_ISDIR(st.st_mode)) CRYO_RETURN_IF_ERROR(Walk(child));
    }
    return absl::OkStatus();
  }

  absl::Status Add(const std::string& rel, const std::string& full, const struct stat& st) {
    struct archive_entry* entry = archive_entry_new();
    auto free_entry = absl::MakeCleanup([entry] { archive_entry_free(entry); });
    archive_entry_copy_sourcepath(entry, full.c_str());
    if (archive_read_disk_entry_from_file(disk_, entry, -1, &st) != ARCHIVE_OK) {
      return ArchiveError(disk_, full);
    }
    archive_entry_copy_pathname(entry, rel.c_str());
    // overlayfs' own bookkeeping (origin, impure, opaque, ...) must not reach the new container.
    std::vector<std::tuple<std::string, std::string>> keep;
    archive_entry_xattr_reset(entry);
    const char* name;
    const void* value;
    size_t size;
    while (archive_entry_xattr_next(entry, &name, &value, &size) == ARCHIVE_OK) {
      if (!absl::StartsWith(name, "trusted.overlay.")) {
        keep.emplace_back(name, std::string(static_cast<const char*>(value), size));
      }
    }
    archive_entry_xattr_clear(entry);
    for (const auto& [n, v] : keep)
      archive_entry_xattr_add_entry(entry, n.c_str(), v.data(), v.size());
    if (archive_write_header(out_, entry) != ARCHIVE_OK) return ArchiveError(out_, rel);
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
      int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", full));
      auto close_fd = absl::MakeCleanup([fd] { ::close(fd); });
      std::unique_ptr<char[]> buf(new char[1 << 20]);
      for (;;) {
        ssize_t n = ::read(fd, buf.get(), 1 << 20);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoStatus(errno, absl::StrCat("read ", full));
        if (n == 0) break;
        if (archive_write_data(out_, buf.get(), n) != n) return ArchiveError(out_, rel);
      }
    }
    diff_.entries++;
    return absl::OkStatus();
  }

  std::string upper_;
  const std::vector<std::string>& excluded_;
  struct archive* out_ = nullptr;
  struct archive* disk_ = nullptr;
  RootfsDiff diff_;
};

}  // namespace

absl::StatusOr<std::vector<MountEntry>> ParseMountInfo(absl::string_view text) {
  std::vector<MountEntry> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    // id parent major:minor root mount-point options [optional...] - fstype source super
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 10 || dash == f.end() || f.end() - dash < 4 || dash - f.begin() < 6) {
      return absl::InvalidArgumentError(absl::StrCat("malformed mountinfo line: ", line));
    }
    MountEntry m;
    m.root = Unescape(f[3]);
    m.mount_point = Unescape(f[4]);
    m.fstype = std::string(dash[1]);
    m.source = Unescape(dash[2]);
    m.super_options = Unescape(dash[3]);
    out.push_back(std::move(m));
  }
  return out;
}

absl::StatusOr<std::string> OverlayUpperDir(const std::vector<MountEntry>& mounts) {
  const MountEntry* root = nullptr;
  for (const auto& m : mounts) {
    if (m.mount_point == "/") root = &m;  // the last one stacked on "/" is what it sees
  }
  if (root == nullptr) return absl::FailedPreconditionError("the container has no root mount");
  if (root->fstype != "overlay") {
    return absl::FailedPreconditionError(
        absl::StrCat("the container's root filesystem is ", root->fstype,
                     ", not overlay: cryo saves writable-layer changes of overlay snapshots only"));
  }
  // Options are comma separated; overlay escapes a comma inside a path as "\,".
  std::string opts = root->super_options;
  size_t start = 0;
  while (start <= opts.size()) {
    size_t end = start;
    while (end < opts.size() && !(opts[end] == ',' && (end == 0 || opts[end - 1] != '\\'))) ++end;
    absl::string_view opt(opts.data() + start, end - start);
    if (absl::ConsumePrefix(&opt, "upperdir=")) {
      return absl::StrReplaceAll(opt, {{"\\,", ","}});
    }
    start = end + 1;
  }
  return absl::FailedPreconditionError(
      "the container's overlay root has no upperdir (read-only root filesystem?)");
}

std::vector<std::string> MountPointsBelowRoot(const std::vector<MountEntry>& mounts) {
  std::vector<std::string> out;
  for (const auto& m : mounts) {
    std::string rel = Relative(m.mount_point);
    if (!rel.empty()) out.push_back(rel);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::StatusOr<RootfsDiff> WriteRootfsDiff(const std::string& upper,
                                           const std::vector<std::string>& excluded,
                                           const std::string& tar_path,
                                           const std::string& deleted_path) {
  if (!fs::IsDir(upper)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "writable layer ", upper,
        " is not visible to cryod (cryod needs the runtime's state directory mounted)"));
  }
  DiffWriter w(upper, excluded);
  CRYO_ASSIGN_OR_RETURN(RootfsDiff diff, w.Write(tar_path));
  nlohmann::json j = diff.deleted;
  CRYO_RETURN_IF_ERROR(fs::WriteFileAtomic(deleted_path, j.dump() + "\n", 0600));
  return diff;
}

absl::StatusOr<std::vector<std::string>> ParseDeletedFiles(absl::string_view json) {
  auto parsed = json::Parse(json, {kMaxDeletedFilesBytes, 2});
  if (!parsed.ok()) return Annotate(parsed.status(), "deleted.files");
  const nlohmann::json& j = *parsed;
  if (!j.is_array()) return absl::InvalidArgumentError("deleted.files is not a JSON array");
  std::vector<std::string> out;
  for (const auto& v : j) {
    if (!v.is_string()) return absl::InvalidArgumentError("deleted.files holds a non-string");
    out.push_back(Relative(v.get<std::string>()));
    CRYO_RETURN_IF_ERROR(CheckRelative(out.back()));
  }
  return out;
}

absl::StatusOr<UniqueFd> OpenDiffFile(int dir_fd, const char* name) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: a link is refused.
  UniqueFd fd(::openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
  if (!fd.ok()) {
    if (errno == ELOOP) {
      return absl::FailedPreconditionError(absl::StrCat(name, " is a symbolic link"));
    }
    return ErrnoStatus(errno, absl::StrCat("open ", name));
  }
  return fs::KeepRegular(std::move(fd), name);
}

absl::StatusOr<std::vector<std::string>> ReadDeletedFiles(int dir_fd, const char* name) {
  auto fd = OpenDiffFile(dir_fd, name);
  if (absl::IsNotFound(fd.status())) return std::vector<std::string>{};
  if (!fd.ok()) return fd.status();
  CRYO_ASSIGN_OR_RETURN(std::string text,
                        fs::ReadOpenFile(*std::move(fd), name, kMaxDeletedFilesBytes));
  if (text.empty()) return std::vector<std::string>{};
  return ParseDeletedFiles(text);
}

absl::Status ApplyRootfsDiff(const std::string& root, int tar_fd,
                             const std::vector<std::string>& deleted) {
  for (const auto& d : deleted) {
    std::string rel = Relative(d);
    CRYO_RETURN_IF_ERROR(CheckRelative(rel));
    CRYO_RETURN_IF_ERROR(fs::RemoveTree(fs::Join(root, rel)));
  }
  struct archive* in = archive_read_new();
  struct archive* out = archive_write_disk_new();
  auto cleanup = absl::MakeCleanup([&] {
    archive_read_free(in);
    archive_write_free(out);
  });
  archive_read_support_format_tar(in);
  archive_write_disk_set_options(
      out, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_OWNER |
               ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_ACL | ARCHIVE_EXTRACT_UNLINK |
               ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT);
  archive_write_disk_set_standard_lookup(out);
  if (archive_read_open_fd(in, tar_fd, 1 << 20) != ARCHIVE_OK) {
    return ArchiveError(in, "open rootfs diff");
  }
  const std::string prefix = root == "/" ? "" : root;
  for (;;) {
    struct archive_entry* e;
    int r = archive_read_next_header(in, &e);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK) return ArchiveError(in, "read rootfs diff");
    std::string rel = Relative(archive_entry_pathname(e));
    CRYO_RETURN_IF_ERROR(CheckRelative(rel));
    // Root "/" (cryo-nsexec) extracts relative to the cwd, which it sets to "/"; a test root
    // is a prefix. CheckRelative has refused absolute and ".." paths already.
    archive_entry_copy_pathname(e, prefix.empty() ? rel.c_str() : fs::Join(prefix, rel).c_str());
    if (const char* hl = archive_entry_hardlink(e)) {
      std::string target = Relative(hl);
      CRYO_RETURN_IF_ERROR(CheckRelative(target));
      archive_entry_copy_hardlink(
          e, prefix.empty() ? target.c_str() : fs::Join(prefix, target).c_str());
    }
    if (archive_write_header(out, e) != ARCHIVE_OK) return ArchiveError(out, rel);
    const void* buf;
    size_t size;
    la_int64_t offset;
    while ((r = archive_read_data_block(in, &buf, &size, &offset)) == ARCHIVE_OK) {
      if (archive_write_data_block(out, buf, size, offset) != ARCHIVE_OK) {
        return ArchiveError(out, rel);
      }
    }
    if (r != ARCHIVE_EOF) return ArchiveError(in, rel);
    if (archive_write_finish_entry(out) != ARCHIVE_OK) return ArchiveError(out, rel);
  }
  if (archive_write_close(out) != ARCHIVE_OK) return ArchiveError(out, "finish rootfs diff");
  return absl::OkStatus();
}

}  // namespace cryo::container
