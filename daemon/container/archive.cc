#include "daemon/container/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "lib/base/fd.h"
#include "lib/base/fs.h"
#include "lib/base/status.h"
#include "lib/contract/archive.h"

namespace cryo::container {
namespace {

class TarWriter {
 public:
  explicit TarWriter(int fd) : a_(archive_write_new()) {
    archive_write_set_format_pax_restricted(a_);
    ok_ = archive_write_open_fd(a_, fd) == ARCHIVE_OK;
  }
  ~TarWriter() { archive_write_free(a_); }

  absl::Status Check(absl::string_view what) {
    if (ok_) return absl::OkStatus();
    const char* m = archive_error_string(a_);
    return absl::InternalError(
        absl::StrCat("writing checkpoint archive (", what, "): ", m ? m : "unknown error"));
  }

  absl::Status AddBytes(const std::string& name, const std::string& data) {
    Header(name, AE_IFREG, 0600, data.size());
    if (ok_ && !data.empty() && archive_write_data(a_, data.data(), data.size()) < 0) ok_ = false;
    return Check(name);
  }

  absl::Status AddDir(const std::string& name) {
    Header(name, AE_IFDIR, 0700, 0);
    return Check(name);
  }

  absl::Status AddFile(const std::string& name, const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("stat ", path));
    return AddWhole({name, path, static_cast<uint64_t>(st.st_size), 0, {}});
  }

  absl::Status AddWhole(const ArchiveFile& f) {
    std::map<std::string, UniqueFd> open;
    auto fd_of = [&](const std::string& path) -> absl::StatusOr<int> {
      auto it = open.find(path);
      if (it != open.end()) return it->second.get();
      UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (fd.get() < 0) return ErrnoStatus(errno, absl::StrCat("open ", path));
      return open.emplace(path, std::move(fd)).first->second.get();
    };
    Header(f.name, AE_IFREG, 0600, f.size);
    // Streamed, never held whole: images can be tens of GiB.
    constexpr uint64_t kPiece = 4 << 20;
    std::unique_ptr<char[]> buf(new char[kPiece]);
    for (uint64_t off = 0; ok_ && off < f.size;) {
      std::string from = f.path;
      uint64_t end = f.size;
      if (f.chunk > 0) {
        const uint64_t idx = off / f.chunk;
        if (auto it = f.elsewhere.find(idx); it != f.elsewhere.end()) from = it->second;
        end = std::min(end, (idx + 1) * f.chunk);
      }
      const size_t want = std::min(kPiece, end - off);
      CRYO_ASSIGN_OR_RETURN(int fd, fd_of(from));
      ssize_t n = ::pread(fd, buf.get(), want, static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(errno, absl::StrCat("read ", from));
      if (n == 0) {
        return absl::DataLossError(
            absl::StrCat(from, " ends at ", off, " bytes; ", f.name, " has ", f.size));
      }
      if (archive_write_data(a_, buf.get(), n) != n) ok_ = false;
      off += static_cast<uint64_t>(n);
    }
    return Check(f.name);
  }

  absl::Status Close() {
    if (ok_ && archive_write_close(a_) != ARCHIVE_OK) ok_ = false;
    return Check("close");
  }

 private:
  void Header(const std::string& name, unsigned type, mode_t mode, int64_t size) {
    if (!ok_) return;
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, mode);
    archive_entry_set_size(e, size);
    archive_entry_set_mtime(e, ::time(nullptr), 0);
    if (archive_write_header(a_, e) != ARCHIVE_OK) ok_ = false;
    archive_entry_free(e);
  }

  struct archive* a_;
  bool ok_ = false;
};

}  // namespace

absl::Status WriteCheckpointArchive(const ArchiveInput& in, const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint archive location '", path, "' is not an absolute path"));
  }
  std::string dir = path.substr(0, path.rfind('/'));
  if (!dir.empty()) CRYO_RETURN_IF_ERROR(fs::MakeDirs(dir, 0700));
  std::string tmp = absl::StrCat(path, ".cryo-tmp");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create ", tmp));
  bool done = false;
  auto cleanup = absl::MakeCleanup([&] {
    ::close(fd);
    if (!done) ::unlink(tmp.c_str());
  });
  {
    TarWriter w(fd);
    CRYO_RETURN_IF_ERROR(w.Check(path));
    CRYO_RETURN_IF_ERROR(w.AddBytes(contract::archive::kConfigDump, in.config_dump.dump(2) + "\n"));
    CRYO_RETURN_IF_ERROR(w.AddBytes(contract::archive::kSpecDump, in.spec_dump.dump(2) + "\n"));
    CRYO_RETURN_IF_ERROR(w.AddDir("checkpoint"));
    CRYO_ASSIGN_OR_RETURN(auto images, fs::ListFilesRecursive(in.images_dir));
    for (const auto& rel : images) {
      CRYO_RETURN_IF_ERROR(w.AddFile(absl::StrCat(contract::archive::kCheckpointDir, "/", rel),
                                     fs::Join(in.images_dir, rel)));
    }
    if (!in.rootfs_diff_tar.empty()) {
      CRYO_RETURN_IF_ERROR(w.AddFile(contract::archive::kRootfsDiff, in.rootfs_diff_tar));
    }
    if (!in.deleted_files.empty())
      CRYO_RETURN_IF_ERROR(w.AddFile(contract::archive::kDeletedFiles, in.deleted_files));
    if (!in.dump_log.empty() && fs::Exists(in.dump_log)) {
      CRYO_RETURN_IF_ERROR(w.AddFile(contract::archive::kDumpLog, in.dump_log));
    }
    for (const ArchiveFile& f : in.files) CRYO_RETURN_IF_ERROR(w.AddWhole(f));
    if (!in.stats_dump.empty() && fs::Exists(in.stats_dump)) {
      CRYO_RETURN_IF_ERROR(w.AddFile(contract::archive::kStatsDump, in.stats_dump));
    }
    for (const auto& [name, data] : in.extra) CRYO_RETURN_IF_ERROR(w.AddBytes(name, data));
    CRYO_RETURN_IF_ERROR(w.Close());
  }
  if (::fsync(fd) != 0) return ErrnoStatus(errno, absl::StrCat("fsync ", tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("rename ", tmp, " to ", path));
  }
  done = true;
  return absl::OkStatus();
}

namespace {

// Calls fn(name, archive) for each entry until it returns false.
absl::Status ForEachEntry(const std::string& path,
                          const std::function<bool(const std::string&, struct archive*)>& fn) {
  struct archive* a = archive_read_new();
  auto cleanup = absl::MakeCleanup([a] { archive_read_free(a); });
  archive_read_support_format_tar(a);
  if (archive_read_open_filename(a, path.c_str(), 1 << 20) != ARCHIVE_OK) {
    return absl::NotFoundError(
        absl::StrCat("cannot open archive ", path, ": ", archive_error_string(a)));
  }
  struct archive_entry* e;
  int r;
  while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
    if (!fn(archive_entry_pathname(e), a)) return absl::OkStatus();
  }
  if (r != ARCHIVE_EOF) {
    return absl::DataLossError(
        absl::StrCat("archive ", path, " is damaged: ", archive_error_string(a)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListArchive(const std::string& path) {
  std::vector<std::string> out;
  CRYO_RETURN_IF_ERROR(ForEachEntry(path, [&](const std::string& name, struct archive*) {
    out.push_back(name);
    return true;
  }));
  return out;
}

absl::StatusOr<std::string> ReadArchiveFile(const std::string& path, const std::string& name) {
  std::optional<std::string> content;
  CRYO_RETURN_IF_ERROR(ForEachEntry(path, [&](const std::string& n, struct archive* a) {
    if (n != name) return true;
    content.emplace();
    char buf[65536];
    la_ssize_t got;
    while ((got = archive_read_data(a, buf, sizeof(buf))) > 0) content->append(buf, got);
    return false;
  }));
  if (!content) return absl::NotFoundError(absl::StrCat(path, " has no entry ", name));
  return *content;
}

}  // namespace cryo::container
