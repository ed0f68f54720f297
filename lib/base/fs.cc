#include "lib/base/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"

namespace cryo::fs {

std::string Join(absl::string_view a, absl::string_view b) {
  if (a.empty()) return std::string(b);
  if (a.back() == '/') return absl::StrCat(a, b);
  return absl::StrCat(a, "/", b);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.ok()) return ErrnoStatus(errno, absl::StrCat("open ", path));
  return ReadOpenFile(std::move(fd), path, UINT64_MAX);
}

absl::Status FsyncPath(const std::string& path) {
  // O_NONBLOCK: a FIFO planted where a file was expected must not block the open.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  // Some filesystems refuse fsync on directories; that is not a durability hole we can fix.
  if (rc != 0 && e != EINVAL) return ErrnoStatus(e, absl::StrCat("fsync ", path));
  return absl::OkStatus();
}

static std::string DirName(const std::string& path) {
  auto pos = path.rfind('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view data, mode_t mode,
                             Durability durability) {
  const bool sync = durability == Durability::kPowerLoss;
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", std::random_device{}());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create ", tmp));
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoStatus(e, absl::StrCat("write ", tmp));
    }
    off += n;
  }
  if (sync && ::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoStatus(e, absl::StrCat("fsync ", tmp));
  }
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus(e, absl::StrCat("close ", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus(e, absl::StrCat("rename ", tmp, " -> ", path));
  }
  return sync ? FsyncPath(DirName(path)) : absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path, mode_t mode) {
  if (path.empty()) return absl::InvalidArgumentError("empty path");
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    cur = path.substr(0, j);
    i = j + 1;
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("mkdir ", cur));
    }
  }
  if (!IsDir(path)) return absl::FailedPreconditionError(absl::StrCat(path, " is not a directory"));
  return absl::OkStatus();
}

static absl::Status RemoveAt(int dirfd, const char* name, const std::string& display) {
  struct stat st;
  if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, absl::StrCat("stat ", display));
  }
  if (S_ISDIR(st.st_mode)) {
    int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", display));
    DIR* d = ::fdopendir(fd);
    if (!d) {
      ::close(fd);
      return ErrnoStatus(errno, absl::StrCat("opendir ", display));
    }
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      names.emplace_back(e->d_name);
    }
    absl::Status st2;
    for (const auto& n : names) {
      absl::Status s = RemoveAt(::dirfd(d), n.c_str(), Join(display, n));
      if (!s.ok() && st2.ok()) st2 = s;
    }
    ::closedir(d);
    if (!st2.ok()) return st2;
    if (::unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, absl::StrCat("rmdir ", display));
    }
    return absl::OkStatus();
  }
  if (::unlinkat(dirfd, name, 0) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("unlink ", display));
  }
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) { return RemoveAt(AT_FDCWD, path.c_str(), path); }

absl::Status RemoveTreeAt(int dirfd, const std::string& name, const std::string& display) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("cannot remove '", name, "' by name"));
  }
  return RemoveAt(dirfd, name.c_str(), display);
}

absl::Status RemoveTreeBeneath(const std::string& root, const std::string& rel) {
  const size_t slash = rel.rfind('/');
  const std::string parent = slash == std::string::npos ? "" : rel.substr(0, slash);
  const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
  auto dir = OpenDirBeneath(root, parent);
  if (absl::IsNotFound(dir.status())) return absl::OkStatus();
  if (!dir.ok()) return dir.status();
  return RemoveTreeAt(dir->get(), name, Join(root, rel));
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Reads the directory stream `d` (and closes it). A link is never a directory here, so no walk
// built on these entries leaves the tree it started in.
static std::vector<Entry> ReadEntries(DIR* d) {
  std::vector<Entry> out;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    Entry en{e->d_name, false};
    if (e->d_type == DT_DIR) {
      en.is_dir = true;
    } else if (e->d_type == DT_UNKNOWN) {
      struct stat st;
      en.is_dir =
          ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    out.push_back(std::move(en));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

absl::StatusOr<std::vector<Entry>> ListDir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return ErrnoStatus(errno, absl::StrCat("opendir ", path));
  return ReadEntries(d);
}

absl::StatusOr<std::vector<Entry>> ListDirAt(int dirfd, const std::string& display) {
  // A descriptor of its own: closedir closes it, and each listing starts at the beginning.
  int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open ", display));
  DIR* d = ::fdopendir(fd);
  if (!d) {
    int e = errno;
    ::close(fd);
    return ErrnoStatus(e, absl::StrCat("opendir ", display));
  }
  return ReadEntries(d);
}

static absl::Status WalkFiles(const std::string& root, const std::string& rel,
                              std::vector<std::string>* out) {
  CRYO_ASSIGN_OR_RETURN(auto entries, ListDir(rel.empty() ? root : Join(root, rel)));
  for (const auto& e : entries) {
    std::string r = rel.empty() ? e.name : Join(rel, e.name);
    if (e.is_dir) {
      CRYO_RETURN_IF_ERROR(WalkFiles(root, r, out));
    } else {
      out->push_back(r);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListFilesRecursive(const std::string& root) {
  std::vector<std::string> out;
  CRYO_RETURN_IF_ERROR(WalkFiles(root, "", &out));
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t TreeBytes(const std::string& root) {
  auto files = ListFilesRecursive(root);
  if (!files.ok()) return 0;
  uint64_t total = 0;
  for (const auto& f : *files) {
    struct stat st;
    if (::stat(Join(root, f).c_str(), &st) == 0) total += st.st_size;
  }
  return total;
}

absl::StatusOr<uint64_t> FreeBytes(const std::string& path) {
  struct statvfs vfs;
  if (::statvfs(path.c_str(), &vfs) != 0) return ErrnoStatus(errno, absl::StrCat("statvfs ", path));
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

absl::Status RestrictModes(const std::string& root) {
  if (::chmod(root.c_str(), 0700) != 0) return ErrnoStatus(errno, absl::StrCat("chmod ", root));
  CRYO_ASSIGN_OR_RETURN(auto entries, ListDir(root));
  for (const auto& e : entries) {
    std::string p = Join(root, e.name);
    struct stat st;
    if (e.is_dir) {
      CRYO_RETURN_IF_ERROR(RestrictModes(p));
    } else if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
               ::chmod(p.c_str(), 0600) != 0) {
      // Only regular files: chmod follows links, and a link's target is not ours to change.
      return ErrnoStatus(errno, absl::StrCat("chmod ", p));
    }
  }
  return absl::OkStatus();
}

absl::Status RenameNoReplace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0) {
    return ErrnoStatus(errno, absl::StrCat("rename ", from, " -> ", to));
  }
  return absl::OkStatus();
}

std::vector<std::string> ListNames(const std::string& path) {
  std::vector<std::string> out;
  auto entries = ListDir(path);
  if (!entries.ok()) return out;
  for (auto& e : *entries) out.push_back(std::move(e.name));
  return out;
}

// openat2 below `root` with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS; a link or an escape is
// FAILED_PRECONDITION naming the path.
static absl::StatusOr<int> OpenBeneath(const std::string& root, const std::string& rel,
                                       uint64_t flags) {
  int dir = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return ErrnoStatus(errno, absl::StrCat("open ", root));
  struct open_how how = {};
  how.flags = flags | O_CLOEXEC | O_NOCTTY;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const char* path = rel.empty() ? "." : rel.c_str();
  int fd = static_cast<int>(::syscall(SYS_openat2, dir, path, &how, sizeof(how)));
  int err = errno;
  ::close(dir);
  if (fd >= 0) return fd;
  const std::string display = rel.empty() ? root : Join(root, rel);
  if (err == ELOOP || err == EXDEV) {
    return absl::FailedPreconditionError(
        absl::StrCat(display, " is reached through a symbolic link or leaves ", root,
                     "; refusing to follow it"));
  }
  if (err == ENOTDIR && (flags & O_DIRECTORY)) {
    return absl::FailedPreconditionError(absl::StrCat(display, " is not a directory"));
  }
  return ErrnoStatus(err, absl::StrCat("open ", display));
}

absl::StatusOr<UniqueFd> OpenDirBeneath(const std::string& root, const std::string& rel) {
  CRYO_ASSIGN_OR_RETURN(int fd, OpenBeneath(root, rel, O_RDONLY | O_DIRECTORY));
  return UniqueFd(fd);
}

absl::StatusOr<UniqueFd> OpenRegularBeneath(const std::string& root, const std::string& rel,
                                            int flags) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  CRYO_ASSIGN_OR_RETURN(
      int raw, OpenBeneath(root, rel, O_RDONLY | O_NONBLOCK | static_cast<uint64_t>(flags)));
  return KeepRegular(UniqueFd(raw), Join(root, rel));
}

absl::StatusOr<UniqueFd> KeepRegular(UniqueFd fd, const std::string& display) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(display, " is not a regular file"));
  }
  // Reads may block from here on, as for any file.
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  return fd;
}

absl::StatusOr<std::string> ReadRegularBeneath(const std::string& root, const std::string& rel,
                                               uint64_t max_bytes) {
  CRYO_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularBeneath(root, rel));
  return ReadOpenFile(std::move(fd), Join(root, rel), max_bytes);
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, const std::string& what,
                                            uint64_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.ok()) return ErrnoStatus(errno, absl::StrCat("opening ", what, " ", path));
  CRYO_ASSIGN_OR_RETURN(fd, KeepRegular(std::move(fd), absl::StrCat(what, " ", path)));
  return ReadOpenFile(std::move(fd), path, max_bytes);
}

constexpr size_t kReadChunk = 64 << 10;

absl::StatusOr<std::string> ReadOpenFile(UniqueFd fd, const std::string& display,
                                         uint64_t max_bytes) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(display, " is larger than ", max_bytes, " bytes"));
  }
  std::string out;
  // On the heap: this runs on threads with small stacks too (the HTTP server's).
  std::vector<char> chunk(kReadChunk);
  char* buf = chunk.data();
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      return ErrnoStatus(e, absl::StrCat("read ", display));
    }
    if (n == 0) break;
    out.append(buf, n);
    if (out.size() > max_bytes) {
      return absl::FailedPreconditionError(
          absl::StrCat(display, " is larger than ", max_bytes, " bytes"));
    }
  }
  return out;
}

}  // namespace cryo::fs
