#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "daemon/store/store.h"
#include "lib/base/fs.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace cryo::store {
namespace {

// Staging names are "<id>+<node>+<random>": '+' never occurs in an id or a sanitized node name.
constexpr char kSep = '+';

class LocalStore;

class LocalStaged final : public StagedCheckpoint {
 public:
  LocalStaged(LocalStore* store, std::string id, std::string dir)
      : store_(store), id_(std::move(id)), dir_(std::move(dir)) {}
  ~LocalStaged() override {
    if (!done_) {
      absl::Status s = Abort();
      if (!s.ok()) CRYO_LOG(Warning) << "abort of staged checkpoint " << id_ << ": " << s;
    }
  }
  const std::string& id() const override { return id_; }
  std::string images_dir() const override { return fs::Join(dir_, kImagesDir); }
  std::string staging_dir() const override { return dir_; }
  absl::Status Publish(const Manifest& m) override;
  absl::Status Abort() override {
    done_ = true;
    return fs::RemoveTree(dir_);
  }

 private:
  LocalStore* store_;
  std::string id_;
  std::string dir_;
  bool done_ = false;
};

class LocalStore final : public CheckpointStore {
 public:
  explicit LocalStore(LocalStoreOptions o) : opts_(std::move(o)) {
    node_ = SanitizeIdPart(opts_.node_name);
  }

  absl::Status Init() {
    for (const auto& d : {opts_.root, published(), staging(), trash()}) {
      CRYO_RETURN_IF_ERROR(Annotate(fs::MakeDirs(d, 0700), "checkpoint store"));
    }
    return absl::OkStatus();
  }

  std::string location() const override { return opts_.root; }
  std::string published() const { return fs::Join(opts_.root, "checkpoints"); }
  std::string staging() const { return fs::Join(opts_.root, ".staging"); }
  std::string trash() const { return fs::Join(opts_.root, ".trash"); }
  bool fsync() const { return opts_.fsync; }

  bool OwnsStagingDir(const std::string& path) const override {
    if (!absl::StartsWith(path, staging() + "/")) return false;
    const std::string name = path.substr(staging().size() + 1);
    return !name.empty() && name.find('/') == std::string::npos && name != "." && name != ".." &&
           absl::StrContains(name, absl::StrCat(std::string(1, kSep), node_, std::string(1, kSep)));
  }

  absl::StatusOr<std::unique_ptr<StagedCheckpoint>> Stage(const std::string& id) override {
    CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
    if (fs::Exists(fs::Join(published(), id))) {
      return absl::AlreadyExistsError(absl::StrCat("checkpoint '", id, "' already exists"));
    }
    std::string dir = fs::Join(staging(), absl::StrCat(id, std::string(1, kSep), node_,
                                                       std::string(1, kSep), RandomHex(6)));
    if (::mkdir(dir.c_str(), 0700) != 0) {
      return Annotate(ErrnoStatus(errno, dir), absl::StrCat("store ", opts_.root));
    }
    if (::mkdir(fs::Join(dir, kImagesDir).c_str(), 0700) != 0) {
      int e = errno;
      (void)fs::RemoveTree(dir);
      return Annotate(ErrnoStatus(e, dir), absl::StrCat("store ", opts_.root));
    }
    return std::unique_ptr<StagedCheckpoint>(new LocalStaged(this, id, dir));
  }

  // `dir` is published()/id. Read through the checkpoints directory, following no link: a
  // checkpoint directory or manifest that is a link (or a FIFO) is not a checkpoint.
  absl::StatusOr<Manifest> ReadManifest(const std::string& dir, const std::string& id) {
    auto text = fs::ReadRegularBeneath(published(), fs::Join(id, kManifestName), kMaxManifestBytes);
    if (!text.ok()) {
      if (absl::IsNotFound(text.status())) {
        return absl::NotFoundError(absl::StrCat("no checkpoint '", id, "' in ", opts_.root));
      }
      return Annotate(text.status(), absl::StrCat("checkpoint '", id, "'"));
    }
    auto m = ParseManifest(*text);
    if (!m.ok()) return Annotate(m.status(), absl::StrCat("checkpoint '", id, "'"));
    if (m->id != id) {
      return absl::DataLossError(
          absl::StrCat("checkpoint directory '", id, "' holds a manifest for '", m->id, "'"));
    }
    if (auto why = fs::ReadRegularBeneath(published(), fs::Join(id, kDamagedName), 4096);
        why.ok()) {
      m->damaged = why->empty() ? "damaged" : *why;
    }
    return m;
  }

  absl::Status MarkDamaged(const std::string& id, const std::string& reason) override {
    CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
    const std::string dir = fs::Join(published(), id);
    if (!fs::Exists(fs::Join(dir, kManifestName))) {
      return absl::NotFoundError(absl::StrCat("no checkpoint '", id, "' in ", opts_.root));
    }
    return fs::WriteFileAtomic(fs::Join(dir, kDamagedName), reason, 0600);
  }

  absl::StatusOr<Manifest> Get(const std::string& id) override {
    CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
    return ReadManifest(fs::Join(published(), id), id);
  }

  absl::StatusOr<std::vector<Manifest>> List() override {
    CRYO_ASSIGN_OR_RETURN(auto entries, fs::ListDir(published()));
    std::vector<Manifest> out;
    for (const auto& e : entries) {
      if (!e.is_dir || !ValidateCheckpointId(e.name).ok()) continue;
      auto m = ReadManifest(fs::Join(published(), e.name), e.name);
      if (m.ok()) {
        out.push_back(std::move(*m));
      } else if (!absl::IsNotFound(m.status())) {
        CRYO_LOG(Warning) << "skipping checkpoint " << e.name << ": " << m.status();
      }
    }
    std::sort(out.begin(), out.end(), [](const Manifest& a, const Manifest& b) {
      if (a.created_at != b.created_at) return a.created_at > b.created_at;
      return a.id > b.id;
    });
    return out;
  }

  absl::Status Delete(const std::string& id) override {
    CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
    std::string dir = fs::Join(published(), id);
    if (!fs::IsDir(dir)) {
      return absl::NotFoundError(absl::StrCat("no checkpoint '", id, "' in ", opts_.root));
    }
    // Move out of sight first so a half-deleted checkpoint is never visible.
    std::string gone = fs::Join(trash(), absl::StrCat(id, std::string(1, kSep), RandomHex(6)));
    CRYO_RETURN_IF_ERROR(fs::RenameNoReplace(dir, gone));
    return fs::RemoveTree(gone);
  }

  absl::StatusOr<std::string> LocalPath(const std::string& id) override {
    CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
    std::string dir = fs::Join(published(), id);
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        !fs::Exists(fs::Join(dir, kManifestName))) {
      return absl::NotFoundError(absl::StrCat("no checkpoint '", id, "' in ", opts_.root));
    }
    return dir;
  }

  absl::StatusOr<int> CollectIncomplete(absl::Duration ttl, bool own_stages) override {
    int removed = 0;
    const absl::Time now = absl::Now();
    auto age = [&](const std::string& p) {
      struct stat st;
      if (::stat(p.c_str(), &st) != 0) return absl::ZeroDuration();
      return now - absl::FromUnixSeconds(st.st_mtime);
    };
    CRYO_ASSIGN_OR_RETURN(auto staged, fs::ListDir(staging()));
    for (const auto& e : staged) {
      std::string p = fs::Join(staging(), e.name);
      std::vector<std::string> parts = absl::StrSplit(e.name, kSep);
      bool mine = parts.size() == 3 && parts[1] == node_;
      if (mine && !own_stages) continue;
      // Another node's stage may be in progress: only an old one is known to be abandoned.
      if (!mine && age(p) < ttl) continue;
      CRYO_LOG(Info) << "collecting incomplete checkpoint " << p;
      if (fs::RemoveTree(p).ok()) ++removed;
    }
    // Published directories without a manifest are invisible; collect them once old.
    CRYO_ASSIGN_OR_RETURN(auto pub, fs::ListDir(published()));
    for (const auto& e : pub) {
      std::string p = fs::Join(published(), e.name);
      if (fs::Exists(fs::Join(p, kManifestName)) || age(p) < ttl) continue;
      CRYO_LOG(Info) << "collecting checkpoint directory without manifest " << p;
      if (fs::RemoveTree(p).ok()) ++removed;
    }
    CRYO_ASSIGN_OR_RETURN(auto junk, fs::ListDir(trash()));
    for (const auto& e : junk) {
      if (fs::RemoveTree(fs::Join(trash(), e.name)).ok()) ++removed;
    }
    return removed;
  }

  absl::StatusOr<std::vector<std::string>> ApplyRetention(
      const std::string& workload, int keep, const std::set<std::string>& in_use) override {
    std::vector<std::string> deleted;
    if (keep <= 0) return deleted;
    CRYO_ASSIGN_OR_RETURN(auto all, List());
    int seen = 0;
    for (const auto& m : all) {
      if (m.workload != workload) continue;
      if (++seen <= keep || in_use.count(m.id)) continue;
      absl::Status s = Delete(m.id);
      if (s.ok()) {
        deleted.push_back(m.id);
      } else {
        CRYO_LOG(Warning) << "retention: delete " << m.id << ": " << s;
      }
    }
    return deleted;
  }

  absl::Status CheckWritable() override {
    std::string probe =
        fs::Join(staging(), absl::StrCat(".probe", std::string(1, kSep), RandomHex(6)));
    int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      int e = errno;
      if (e == EROFS) {
        return absl::FailedPreconditionError(
            absl::StrCat("checkpoint store ", opts_.root, " is read-only"));
      }
      return Annotate(ErrnoStatus(e, probe), "checkpoint store is not writable");
    }
    ::close(fd);
    ::unlink(probe.c_str());
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> FreeBytes() override { return fs::FreeBytes(opts_.root); }
  bool durable() const override { return opts_.fsync; }

 private:
  LocalStoreOptions opts_;
  std::string node_;
};

// Every file, then every directory holding one (their entries must be durable too).
absl::Status FsyncTree(const std::string& root) {
  CRYO_ASSIGN_OR_RETURN(auto files, fs::ListFilesRecursive(root));
  std::set<std::string> dirs;
  for (const auto& f : files) {
    CRYO_RETURN_IF_ERROR(fs::FsyncPath(fs::Join(root, f)));
    for (size_t slash = f.find('/'); slash != std::string::npos; slash = f.find('/', slash + 1)) {
      dirs.insert(f.substr(0, slash));
    }
  }
  for (const auto& d : dirs) CRYO_RETURN_IF_ERROR(fs::FsyncPath(fs::Join(root, d)));
  return fs::FsyncPath(root);
}

absl::Status LocalStaged::Publish(const Manifest& m) {
  if (done_) return absl::FailedPreconditionError("staged checkpoint already finished");
  if (m.id != id_) return absl::InvalidArgumentError("manifest id differs from the staged id");
  // CRIU writes with its own modes; images hold process memory, so nobody else may read them.
  CRYO_RETURN_IF_ERROR(fs::RestrictModes(dir_));
  // The whole checkpoint: the images and, in container mode, the writable-layer diff.
  if (store_->fsync()) CRYO_RETURN_IF_ERROR(FsyncTree(dir_));
  CRYO_RETURN_IF_ERROR(fs::WriteFileAtomic(fs::Join(dir_, kManifestName), ManifestToJson(m)));
  std::string target = fs::Join(store_->published(), id_);
  absl::Status s = fs::RenameNoReplace(dir_, target);
  if (!s.ok()) {
    if (absl::IsAlreadyExists(s)) {
      return absl::AlreadyExistsError(absl::StrCat("checkpoint '", id_, "' already exists"));
    }
    return s;
  }
  done_ = true;
  return fs::FsyncPath(store_->published());
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointStore>> CreateLocalStore(const LocalStoreOptions& opts) {
  if (opts.root.empty() || opts.root[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("store path must be absolute, got '", opts.root, "'"));
  }
  auto s = std::make_unique<LocalStore>(opts);
  CRYO_RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<CheckpointStore>(std::move(s));
}

}  // namespace cryo::store
