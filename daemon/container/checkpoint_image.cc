#include "daemon/container/checkpoint_image.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/store/checksum.h"
#include "lib/base/fs.h"
#include "lib/base/json.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/contract/archive.h"
#include "nlohmann/json.hpp"

namespace cryo::container {
namespace {

constexpr size_t kMaxConfigDump = 1 << 20;
// What may follow a layer's tar in its stream (tar's zero blocks, a compressor's end).
constexpr uint64_t kMaxAfterTar = 1 << 20;

std::string Normalize(absl::string_view name) {
  while (absl::ConsumePrefix(&name, "./") || absl::ConsumePrefix(&name, "/")) {
  }
  while (absl::ConsumeSuffix(&name, "/")) {
  }
  return std::string(name == "." ? "" : name);
}

absl::Status ReadEntry(struct archive* a, const std::string& name, size_t limit, std::string* out) {
  char buf[65536];
  la_ssize_t got;
  while ((got = archive_read_data(a, buf, sizeof(buf))) > 0) {
    if (out->size() + got > limit) {
      return absl::DataLossError(absl::StrCat(name, " is larger than ", limit, " bytes"));
    }
    out->append(buf, got);
  }
  if (got < 0) return absl::DataLossError(absl::StrCat(name, ": ", archive_error_string(a)));
  return absl::OkStatus();
}

struct Budget {
  const ImportLimits* limits = nullptr;
  uint64_t bytes = 0;
  std::set<std::string> files;
  bool saw_manifest = false;
  absl::Status Stopped() const {
    if (limits->stop && limits->stop()) {
      return absl::CancelledError(
          "the import was stopped (cancelled, past its deadline, or "
          "cryod is shutting down); nothing was published");
    }
    return absl::OkStatus();
  }
};

absl::Status WriteEntry(struct archive* a, const std::string& dir, const std::string& rel,
                        Budget* budget) {
  const std::string path = fs::Join(dir, rel);
  CRYO_RETURN_IF_ERROR(fs::MakeDirs(path.substr(0, path.rfind('/')), 0700));
  ::unlink(path.c_str());  // a later layer's copy wins
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("create ", path));
  auto close_fd = absl::MakeCleanup([fd] { ::close(fd); });
  std::unique_ptr<char[]> buf(new char[1 << 20]);
  la_ssize_t got;
  while ((got = archive_read_data(a, buf.get(), 1 << 20)) > 0) {
    // Counted as written, holes of a sparse entry included: they become real blocks here.
    const uint64_t before = budget->bytes;
    budget->bytes += static_cast<uint64_t>(got);
    if (budget->bytes > budget->limits->max_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the image's files exceed ", budget->limits->max_bytes,
                       " bytes, what the store can take now; nothing was published"));
    }
    const uint64_t every = ImportLimits::kRoomEvery;
    if (budget->limits->room && before / every != budget->bytes / every) {
      CRYO_RETURN_IF_ERROR(budget->limits->room(budget->bytes));
    }
    CRYO_RETURN_IF_ERROR(budget->Stopped());
    for (la_ssize_t off = 0; off < got;) {
      ssize_t n = ::write(fd, buf.get() + off, got - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(errno, absl::StrCat("write ", path));
      off += n;
    }
  }
  if (got < 0) return absl::DataLossError(absl::StrCat(rel, ": ", archive_error_string(a)));
  return absl::OkStatus();
}

struct LayerFiles {
  std::string cryo_manifest;
  std::string config_dump;
};

// Reads a layer tar (any compression libarchive knows: gzip, zstd, none) from `fd`.
absl::Status ExtractLayer(int fd, const std::string& what, const std::string& dir, LayerFiles* out,
                          Budget* budget) {
  struct archive* a = archive_read_new();
  auto free_archive = absl::MakeCleanup([a] { archive_read_free(a); });
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  if (archive_read_open_fd(a, fd, 1 << 20) != ARCHIVE_OK) {
    return absl::DataLossError(absl::StrCat(what, ": ", archive_error_string(a)));
  }
  struct archive_entry* e;
  int r;
  while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
    CRYO_RETURN_IF_ERROR(budget->Stopped());
    const std::string name = Normalize(archive_entry_pathname(e));
    const auto type = archive_entry_filetype(e);
    if (name.empty() || type == AE_IFDIR) continue;
    if (std::count(name.begin(), name.end(), '/') > budget->limits->max_depth) {
      return absl::DataLossError(absl::StrCat(what, " holds ", name.substr(0, 256),
                                              ", nested deeper than ", budget->limits->max_depth,
                                              " directories"));
    }
    if (type != AE_IFREG || archive_entry_hardlink(e) != nullptr) {
      // Nothing a checkpoint archive holds is a link or a device: never recreate one here.
      return absl::DataLossError(
          absl::StrCat(what, " holds ", name, ", which is not a regular file or directory"));
    }
    if (name == contract::archive::kCryoManifest) {
      if (budget->saw_manifest) {
        return absl::DataLossError(absl::StrCat(what, " holds a second ",
                                                contract::archive::kCryoManifest,
                                                ": which one is the checkpoint's is unknowable"));
      }
      budget->saw_manifest = true;
      out->cryo_manifest.clear();
      CRYO_RETURN_IF_ERROR(ReadEntry(a, name, store::kMaxManifestBytes, &out->cryo_manifest));
      continue;
    }
    if (name == contract::archive::kConfigDump) {
      out->config_dump.clear();
      CRYO_RETURN_IF_ERROR(ReadEntry(a, name, kMaxConfigDump, &out->config_dump));
      continue;
    }
    const std::string rel = StorePathOfArchiveFile(name);
    if (rel.empty()) {
      archive_read_data_skip(a);
      continue;
    }
    if (!store::SafeRelativePath(rel)) {
      return absl::DataLossError(absl::StrCat(what, " holds an unsafe path: ", name));
    }
    if (budget->files.insert(rel).second && budget->files.size() > budget->limits->max_files) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, " holds more than ", budget->limits->max_files, " files"));
    }
    CRYO_RETURN_IF_ERROR(Annotate(WriteEntry(a, dir, rel, budget), what));
  }
  if (r != ARCHIVE_EOF) {
    return absl::DataLossError(absl::StrCat(what, " is damaged: ", archive_error_string(a)));
  }
  return absl::OkStatus();
}

// Streams one layer from the content store through a socket pair into the tar reader, so that a
// checkpoint of many GiB is never held in memory nor written twice.
absl::Status UnpackLayer(containerd::ImageContent& images, const containerd::Blob& layer,
                         const std::string& what, const std::string& dir, absl::Time deadline,
                         LayerFiles* out, Budget* budget) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus(errno, "socketpair");
  }
  absl::Status read_status;
  bool reader_gone = false;  // written by the feeder, read after it is joined
  std::thread feeder([&] {
    read_status = images.ReadBlob(layer, deadline, [&](absl::string_view d) -> absl::Status {
      while (!d.empty()) {
        ssize_t n = ::send(sv[1], d.data(), d.size(), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        // The reader closed its end: EPIPE, or ECONNRESET when it left data unread (a unix
        // socket closed with bytes in its queue resets its peer).
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) reader_gone = true;
        if (n < 0) return ErrnoStatus(errno, "passing the layer on");
        d.remove_prefix(n);
      }
      return absl::OkStatus();
    });
    ::close(sv[1]);
  });
  absl::Status st = ExtractLayer(sv[0], what, dir, out, budget);
  if (st.ok()) {
    // The tar ends before the stream does (padding, a compressor's trailer): read to the end so
    // the feeder finishes, but not forever: a layer that goes on is refused.
    char buf[65536];
    uint64_t after = 0;
    for (ssize_t n; (n = ::read(sv[0], buf, sizeof(buf))) > 0;) {
      after += static_cast<uint64_t>(n);
      if (after > kMaxAfterTar) {
        st = absl::DataLossError(absl::StrCat(what, " goes on past the end of its tar"));
        break;
      }
      if (absl::Status stopped = budget->Stopped(); !stopped.ok()) {
        st = stopped;
        break;
      }
    }
  }
  ::close(sv[0]);  // a feeder still sending now fails and stops
  feeder.join();
  // A stream cut short shows as a damaged tar: say why it was cut. But when the reader refused
  // first (a 17 MiB cryo-manifest.json, a link, a layer that goes on), the feeder failed only
  // because the reader had stopped (a broken pipe or a reset): the refusal is the answer.
  if (!read_status.ok() && !reader_gone) return Annotate(read_status, what);
  return st;
}

}  // namespace

std::string StorePathOfArchiveFile(const std::string& archive_path) {
  absl::string_view p = archive_path;
  if (absl::ConsumePrefix(&p, absl::StrCat(contract::archive::kCheckpointDir, "/")) && !p.empty()) {
    return absl::StrCat(store::kImagesDir, "/", p);
  }
  if (p == contract::archive::kRootfsDiff) return contract::checkpoint::kRootfsDiff;
  if (p == contract::archive::kDeletedFiles) return contract::checkpoint::kDeletedFiles;
  // cryo's other files: never CRIU's images or the writable layer by another name.
  if (absl::ConsumePrefix(&p, absl::StrCat(contract::archive::kCryoDir, "/")) && !p.empty() &&
      !absl::StartsWith(p, absl::StrCat(store::kImagesDir, "/")) &&
      !absl::StartsWith(p, absl::StrCat(contract::checkpoint::kContainerDir, "/"))) {
    return std::string(p);
  }
  return "";
}

std::string ArchivePathOfStoreFile(const std::string& store_path) {
  absl::string_view p = store_path;
  if (absl::ConsumePrefix(&p, absl::StrCat(store::kImagesDir, "/"))) {
    return absl::StrCat(contract::archive::kCheckpointDir, "/", p);
  }
  if (p == contract::checkpoint::kRootfsDiff) return contract::archive::kRootfsDiff;
  if (p == contract::checkpoint::kDeletedFiles) return contract::archive::kDeletedFiles;
  return absl::StrCat(contract::archive::kCryoDir, "/", p);
}

absl::StatusOr<UnpackedImage> UnpackCheckpointImage(containerd::ImageContent& images,
                                                    const containerd::ImageManifest& image,
                                                    const std::string& dir, absl::Time deadline,
                                                    int verify_threads,
                                                    const ImportLimits& limits) {
  const std::string name = absl::StrCat("checkpoint image ", image.name);
  Budget budget;
  budget.limits = &limits;
  if (image.layers.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(name, " has no layer"));
  }
  LayerFiles files;
  for (size_t i = 0; i < image.layers.size(); ++i) {
    CRYO_RETURN_IF_ERROR(UnpackLayer(images, image.layers[i],
                                     absl::StrCat(name, ", layer ", image.layers[i].digest), dir,
                                     deadline, &files, &budget));
  }
  if (files.cryo_manifest.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name, " holds no ", contract::archive::kCryoManifest,
        ": it was not made from a checkpoint archive that cryo wrote, and cryo restores only its "
        "own checkpoints"));
  }
  UnpackedImage out;
  auto m = store::ParseManifest(files.cryo_manifest);
  if (!m.ok()) {
    return absl::DataLossError(absl::StrCat(name, ": its ", contract::archive::kCryoManifest,
                                            " is damaged: ", m.status().message()));
  }
  out.manifest = std::move(*m);
  // An image holds its checkpoint whole: one that refers to checkpoints in this store (which
  // its author may name at will) would load their data into the author's job.
  if (auto refs = out.manifest.References(); !refs.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        name, " refers to checkpoint ", *refs.begin(),
        " of this store for part of its data; a checkpoint image must hold all of it"));
  }
  if (out.manifest.kind != store::CheckpointKind::kContainer || !out.manifest.container) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " holds a checkpoint of a process tree, not of a container"));
  }
  std::vector<ExpectedFile> expected;
  std::set<std::string> listed;
  for (auto& f : out.manifest.files) {
    std::string rel = StorePathOfArchiveFile(f.path);
    if (rel.empty() || !store::SafeRelativePath(rel)) {
      return absl::DataLossError(absl::StrCat(name, ": its ", contract::archive::kCryoManifest,
                                              " lists ", f.path,
                                              ", which is not a file of a checkpoint archive"));
    }
    f.path = rel;
    listed.insert(rel);
    expected.push_back({f.path, f.size, f.checksum});
  }
  // What the manifest does not list would reach CRIU unverified (it reads images by name).
  for (const std::string& rel : budget.files) {
    if (!listed.count(rel)) {
      return absl::DataLossError(absl::StrCat(name, " holds ", rel.substr(0, 256), ", which its ",
                                              contract::archive::kCryoManifest,
                                              " does not list: refusing it"));
    }
  }
  // Every file, before the checkpoint exists: a damaged image must never half-restore a job.
  if (absl::Status st = VerifyFiles(dir, expected, verify_threads); !st.ok()) {
    return Annotate(st, absl::StrCat(name, " is damaged, refusing it"));
  }
  if (!files.config_dump.empty()) {
    auto parsed = json::Parse(files.config_dump, {4u << 20, 64});
    nlohmann::json c = parsed.ok() ? std::move(*parsed) : nlohmann::json();
    if (c.is_object() && c.contains("rootfsImageName") && c["rootfsImageName"].is_string()) {
      out.rootfs_image = c["rootfsImageName"].get<std::string>();
    }
  }
  return out;
}

}  // namespace cryo::container
