#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/store/job_records.h"
#include "daemon/store/store.h"
#include "lib/base/fd.h"
#include "lib/base/fs.h"
#include "lib/base/ids.h"
#include "lib/base/io_all.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/contract/job.h"

namespace cryo::store {
namespace {

// Staging names are "<id>+<node>+<random>": '+' never occurs in an id or a sanitized node name.
constexpr char kSep = '+';
// The store's layout below its root; each is a real directory, never a link.
constexpr char kPublishedDir[] = "checkpoints";
constexpr char kStagingDir[] = ".staging";
constexpr const char* kLayout[] = {kPublishedDir, kStagingDir, kTrashDir, kJobsDir};
// What every store has had since its first version: a directory holding these is a store.
constexpr const char* kLayoutV1[] = {kPublishedDir, kStagingDir, kTrashDir};

class LocalStore;

class LocalStaged final : public StagedCheckpoint {
 public:
  LocalStaged(LocalStore* store, std::string id, std::string name, std::string dir)
      : store_(store), id_(std::move(id)), name_(std::move(name)), dir_(std::move(dir)) {}
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
  absl::Status Abort() override;

 private:
  LocalStore* store_;
  std::string id_;
  std::string name_;  // below .staging
  std::string dir_;
  bool done_ = false;
};

class LocalStore final : public CheckpointStore {
 public:
  explicit LocalStore(LocalStoreOptions o)
      : opts_(std::move(o)),
        node_(SanitizeIdPart(opts_.node_name)),
        jobs_({opts_.root, node_, opts_.fsync, [this] { return Ready(); },
               [this](const char* dir) { return Open(dir); },
               [this](const std::string& id) { return Get(id); },
               [this](const std::string& id) { return Delete(id); }}) {}

  absl::Status Init() {
    CRYO_RETURN_IF_ERROR(Annotate(fs::MakeDirs(opts_.root, 0700), "checkpoint store"));
    struct stat st;
    if (::stat(opts_.root.c_str(), &st) != 0) return ErrnoStatus(errno, opts_.root);
    {
      absl::MutexLock l(&mu_);
      dev_ = st.st_dev;
      ino_ = st.st_ino;
    }
    CRYO_RETURN_IF_ERROR(Ready());
    // A link in the layout is refused at start, so nobody runs a store that cannot delete.
    return CheckLayout();
  }

  absl::Status CheckLayout() const {
    for (const char* d : kLayout) {
      CRYO_ASSIGN_OR_RETURN(UniqueFd fd, Open(d));
    }
    return absl::OkStatus();
  }

  std::string location() const override { return opts_.root; }
  std::string published() const { return fs::Join(opts_.root, kPublishedDir); }
  std::string staging() const { return fs::Join(opts_.root, kStagingDir); }
  std::string jobs() const { return fs::Join(opts_.root, kJobsDir); }
  bool fsync() const { return opts_.fsync; }

  // A directory of the layout, opened below the root without following links: a `.trash` or
  // `.staging` planted as a link to a host directory is refused, never emptied.
  absl::StatusOr<UniqueFd> Open(const char* layout_dir) const {
    auto fd = fs::OpenDirBeneath(opts_.root, layout_dir);
    if (!fd.ok()) return Annotate(fd.status(), "checkpoint store layout");
    return *std::move(fd);
  }

  // Notices a store directory that was deleted or replaced since the last call. Deleted: every
  // call is UNAVAILABLE until it is back. Recreated on the same filesystem: the layout is made
  // again and the store goes on. Replaced by a directory on another filesystem (a share
  // unmounted under a running cryod): used only if it holds a store already, since writing a new
  // one there would put checkpoints on the wrong disk.
  absl::Status Ready() {
    struct stat st;
    if (::stat(opts_.root.c_str(), &st) != 0) {
      if (errno == ENOENT) {
        return absl::UnavailableError(absl::StrCat("checkpoint store ", opts_.root,
                                                   " does not exist (deleted, or not mounted)"));
      }
      return Annotate(ErrnoStatus(errno, opts_.root), "checkpoint store");
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint store ", opts_.root, " is not a directory"));
    }
    absl::MutexLock l(&mu_);
    if (st.st_dev != dev_ || st.st_ino != ino_) {
      const bool same_fs = st.st_dev == dev_;
      bool has_layout = true;
      for (const char* d : kLayoutV1) {
        has_layout = has_layout && fs::Exists(fs::Join(opts_.root, d));
      }
      if (!same_fs && !has_layout) {
        return absl::UnavailableError(absl::StrCat(
            "checkpoint store ", opts_.root,
            " was replaced by a directory on another filesystem that holds no store (an "
            "unmounted share?); mount the store again, or restart cryod to start a new store "
            "there"));
      }
      CRYO_LOG(Warning) << "checkpoint store " << opts_.root << " was replaced ("
                        << (same_fs ? "recreated" : "another filesystem holding a store")
                        << "); going on with the new directory";
      dev_ = st.st_dev;
      ino_ = st.st_ino;
    }
    for (const char* d : kLayout) {
      const std::string p = fs::Join(opts_.root, d);
      struct stat ds;
      if (::lstat(p.c_str(), &ds) == 0) continue;
      if (errno != ENOENT) return Annotate(ErrnoStatus(errno, p), "checkpoint store");
      if (::mkdir(p.c_str(), 0700) != 0 && errno != EEXIST) {
        return Annotate(ErrnoStatus(errno, p), "checkpoint store");
      }
      CRYO_LOG(Info) << "checkpoint store: recreated " << p;
    }
    return absl::OkStatus();
  }

  bool OwnsStagingDir(const std::string& path) const override { return !StagingName(path).empty(); }

  // The name below .staging of one of this node's staging directories, or "".
  std::string StagingName(const std::string& path) const {
    if (!absl::StartsWith(path, staging() + "/")) return "";
    const std::string name = path.substr(staging().size() + 1);
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." ||
        !absl::StrContains(name, absl::StrCat(std::string(1, kSep), node_, std::string(1, kSep)))) {
      return "";
    }
    return name;
  }

  absl::Status RemoveStagingDir(const std::string& path) override {
    const std::string name = StagingName(path);
    if (name.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is not a staging directory of this node in ", opts_.root));
    }
    CRYO_RETURN_IF_ERROR(Ready());
    CRYO_ASSIGN_OR_RETURN(UniqueFd dir, Open(kStagingDir));
    return fs::RemoveTreeAt(dir.get(), name, path);
  }

  absl::StatusOr<std::unique_ptr<StagedCheckpoint>> Stage(const std::string& id) override {
    CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
    CRYO_RETURN_IF_ERROR(Ready());
    CRYO_ASSIGN_OR_RETURN(UniqueFd pub, Open(kPublishedDir));
    CRYO_ASSIGN_OR_RETURN(UniqueFd stage, Open(kStagingDir));
    struct stat st;
    if (::fstatat(pub.get(), id.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      return absl::AlreadyExistsError(absl::StrCat("checkpoint '", id, "' already exists"));
    }
    const std::string name =
        absl::StrCat(id, std::string(1, kSep), node_, std::string(1, kSep), RandomHex(6));
    const std::string dir = fs::Join(staging(), name);
    if (::mkdirat(stage.get(), name.c_str(), 0700) != 0) {
      return Annotate(ErrnoStatus(errno, dir), absl::StrCat("store ", opts_.root));
    }
    const std::string images = fs::Join(name, kImagesDir);
    if (::mkdirat(stage.get(), images.c_str(), 0700) != 0) {
      int e = errno;
      (void)fs::RemoveTreeAt(stage.get(), name, dir);  // the collector's, if it stays
      return Annotate(ErrnoStatus(e, dir), absl::StrCat("store ", opts_.root));
    }
    return std::unique_ptr<StagedCheckpoint>(new LocalStaged(this, id, name, dir));
  }

  // Read below the store's root, following no link: a checkpoint directory or manifest that is
  // a link (or a FIFO) is not a checkpoint.
  absl::StatusOr<Manifest> ReadManifest(const std::string& id) {
    const std::string rel = fs::Join(kPublishedDir, id);
    auto fd = fs::OpenRegularBeneath(opts_.root, fs::Join(rel, kManifestName));
    if (!fd.ok()) {
      if (absl::IsNotFound(fd.status())) {
        return absl::NotFoundError(absl::StrCat("no checkpoint '", id, "' in ", opts_.root));
      }
      return Annotate(fd.status(), absl::StrCat("checkpoint '", id, "'"));
    }
    struct stat st = {};
    std::optional<absl::StatusOr<Manifest>> m;
    const bool known = ::fstat(fd->get(), &st) == 0;
    if (known) m = CachedManifest(id, st);
    if (!m) {
      auto text = fs::ReadOpenFile(
          *std::move(fd), fs::Join(opts_.root, fs::Join(rel, kManifestName)), kMaxManifestBytes);
      if (!text.ok()) return Annotate(text.status(), absl::StrCat("checkpoint '", id, "'"));
      m = ParseManifestOf(id, *text);
      // A refused manifest is remembered too: one planted in the store is parsed once, not on
      // every listing (a 5.5 MB one took cryod to gigabytes under a stream of listings).
      if (known) KeepManifest(id, st, *m);
    }
    if (!m->ok()) return m->status();
    if (auto why = fs::ReadRegularBeneath(opts_.root, fs::Join(rel, kDamagedName), 4096);
        why.ok()) {
      (*m)->damaged = why->empty() ? "damaged" : *why;
    }
    return *std::move(*m);
  }

  absl::Status MarkDamaged(const std::string& id, const std::string& reason) override {
    CRYO_ASSIGN_OR_RETURN(std::string dir, LocalPath(id));
    return fs::WriteFileAtomic(fs::Join(dir, kDamagedName), reason, 0600);
  }

  absl::StatusOr<Manifest> Get(const std::string& id) override {
    CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
    CRYO_RETURN_IF_ERROR(Ready());
    return ReadManifest(id);
  }

  absl::StatusOr<std::vector<Manifest>> List() override {
    CRYO_RETURN_IF_ERROR(Ready());
    CRYO_ASSIGN_OR_RETURN(UniqueFd pub, Open(kPublishedDir));
    CRYO_ASSIGN_OR_RETURN(auto entries, fs::ListDirAt(pub.get(), published()));
    std::vector<Manifest> out;
    std::set<std::string> seen;
    for (const auto& e : entries) {
      if (!e.is_dir || !ValidateCheckpointId(e.name).ok()) continue;
      seen.insert(e.name);
      auto m = ReadManifest(e.name);
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
    ForgetManifestsBut(seen);  // deleted since, by any node
    return out;
  }

  absl::Status Delete(const std::string& id) override {
    CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
    CRYO_RETURN_IF_ERROR(Ready());
    CRYO_ASSIGN_OR_RETURN(UniqueFd pub, Open(kPublishedDir));
    CRYO_ASSIGN_OR_RETURN(UniqueFd trash, Open(kTrashDir));
    struct stat st;
    if (::fstatat(pub.get(), id.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::NotFoundError(absl::StrCat("no checkpoint '", id, "' in ", opts_.root));
    }
    // Move out of sight first so a half-deleted checkpoint is never visible.
    const std::string gone = absl::StrCat(id, std::string(1, kSep), RandomHex(6));
    if (::renameat2(pub.get(), id.c_str(), trash.get(), gone.c_str(), RENAME_NOREPLACE) != 0) {
      return ErrnoStatus(errno, absl::StrCat("move ", fs::Join(published(), id), " to the trash"));
    }
    ForgetManifest(id);
    return fs::RemoveTreeAt(trash.get(), gone, fs::Join(fs::Join(opts_.root, kTrashDir), gone));
  }

  absl::StatusOr<std::string> LocalPath(const std::string& id) override {
    CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
    CRYO_RETURN_IF_ERROR(Ready());
    CRYO_ASSIGN_OR_RETURN(UniqueFd pub, Open(kPublishedDir));
    struct stat st;
    auto manifest =
        fs::OpenRegularBeneath(opts_.root, fs::Join(fs::Join(kPublishedDir, id), kManifestName));
    if (::fstatat(pub.get(), id.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        !manifest.ok()) {
      return absl::NotFoundError(absl::StrCat("no checkpoint '", id, "' in ", opts_.root));
    }
    return fs::Join(published(), id);
  }

  absl::StatusOr<int> CollectIncomplete(absl::Duration ttl, bool own_stages,
                                        const std::set<std::string>& keep) override {
    CRYO_RETURN_IF_ERROR(Ready());
    std::set<std::string> kept;
    for (const std::string& path : keep) kept.insert(StagingName(path));
    int removed = 0;
    const absl::Time now = absl::Now();
    // Ages and kinds from the entry itself, never from what a link points at.
    auto age = [&](int dir, const std::string& name) {
      struct stat st;
      if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return absl::ZeroDuration();
      return now - absl::FromUnixSeconds(st.st_mtime);
    };
    auto remove = [&](int dir, const char* layout_dir, const std::string& name) {
      const std::string p = fs::Join(fs::Join(opts_.root, layout_dir), name);
      absl::Status s = fs::RemoveTreeAt(dir, name, p);
      if (s.ok()) {
        ++removed;
      } else {
        CRYO_LOG(Warning) << "collecting " << p << ": " << s;
      }
    };
    {
      CRYO_ASSIGN_OR_RETURN(UniqueFd dir, Open(kStagingDir));
      CRYO_ASSIGN_OR_RETURN(auto staged, fs::ListDirAt(dir.get(), staging()));
      for (const auto& e : staged) {
        std::vector<std::string> parts = absl::StrSplit(e.name, kSep);
        bool mine = parts.size() == 3 && parts[1] == node_;
        if (mine && (!own_stages || kept.count(e.name))) continue;
        // Another node's stage may be in progress: only an old one is known to be abandoned.
        if (!mine && age(dir.get(), e.name) < ttl) continue;
        CRYO_LOG(Info) << "collecting incomplete checkpoint " << fs::Join(staging(), e.name);
        remove(dir.get(), kStagingDir, e.name);
      }
    }
    {
      // Published directories without a manifest are invisible; collect them once old, and
      // anything else found there (a link is removed itself, not what it points at).
      CRYO_ASSIGN_OR_RETURN(UniqueFd dir, Open(kPublishedDir));
      CRYO_ASSIGN_OR_RETURN(auto pub, fs::ListDirAt(dir.get(), published()));
      for (const auto& e : pub) {
        struct stat st;
        if (e.is_dir && ::fstatat(dir.get(), fs::Join(e.name, kManifestName).c_str(), &st,
                                  AT_SYMLINK_NOFOLLOW) == 0) {
          continue;
        }
        if (age(dir.get(), e.name) < ttl) continue;
        CRYO_LOG(Info) << "collecting checkpoint entry without manifest "
                       << fs::Join(published(), e.name);
        remove(dir.get(), kPublishedDir, e.name);
      }
    }
    {
      // Records half written by a node that died before its rename.
      CRYO_ASSIGN_OR_RETURN(UniqueFd dir, Open(kJobsDir));
      CRYO_ASSIGN_OR_RETURN(auto recs, fs::ListDirAt(dir.get(), jobs()));
      for (const auto& e : recs) {
        // ... and members' arrivals of a resume long over.
        if ((!absl::StartsWith(e.name, kJobTempPrefix) &&
             !absl::StrContains(e.name, kJobArrivalInfix)) ||
            age(dir.get(), e.name) < ttl) {
          continue;
        }
        remove(dir.get(), kJobsDir, e.name);
      }
    }
    {
      // Parts of job checkpoints that were never committed: once old, the commit is not coming.
      CRYO_ASSIGN_OR_RETURN(auto all, List());
      CRYO_ASSIGN_OR_RETURN(UniqueFd dir, Open(kPublishedDir));
      for (const auto& m : all) {
        if (!m.job || age(dir.get(), m.id) < ttl) continue;
        auto jc = GetJobCheckpoint(m.job->namespace_, m.job->job, m.job->job_checkpoint);
        if (!absl::IsNotFound(jc.status())) continue;
        CRYO_LOG(Info) << "collecting checkpoint " << m.id << ": member " << m.job->member
                       << "'s part of job checkpoint " << m.job->job_checkpoint << " of "
                       << m.job->namespace_ << "/" << m.job->job << ", never committed";
        if (absl::Status s = Delete(m.id); s.ok()) {
          ++removed;
        } else {
          CRYO_LOG(Warning) << "collecting " << m.id << ": " << s;
        }
      }
    }
    {
      CRYO_ASSIGN_OR_RETURN(UniqueFd dir, Open(kTrashDir));
      CRYO_ASSIGN_OR_RETURN(auto junk, fs::ListDirAt(dir.get(), fs::Join(opts_.root, kTrashDir)));
      for (const auto& e : junk) remove(dir.get(), kTrashDir, e.name);
    }
    return removed;
  }

  absl::StatusOr<std::vector<std::string>> ApplyRetention(
      const std::string& workload, int keep, const std::set<std::string>& in_use) override {
    std::vector<std::string> deleted;
    if (keep <= 0) return deleted;
    CRYO_ASSIGN_OR_RETURN(auto all, List());
    // The newest `keep` good ones stay; a damaged one newer than the last of them stays for
    // inspection, one older goes with the rest.
    int good = 0;
    std::set<std::string> doomed;
    for (const auto& m : all) {
      if (m.workload != workload || m.job) continue;
      if (good < keep) {
        if (m.damaged.empty()) ++good;
        continue;
      }
      if (!in_use.count(m.id)) doomed.insert(m.id);
    }
    // What a checkpoint that stays refers to stays too (incremental GPU data), and what that
    // one refers to: until nothing that stays needs more.
    for (bool more = true; more;) {
      more = false;
      for (const auto& m : all) {
        if (doomed.count(m.id)) continue;
        for (const auto& r : m.References()) more = doomed.erase(r) > 0 || more;
      }
    }
    for (const auto& m : all) {
      if (!doomed.count(m.id)) continue;
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
    CRYO_RETURN_IF_ERROR(Ready());
    // Every directory of the layout must be usable: a link there is damage to report.
    CRYO_RETURN_IF_ERROR(CheckLayout());
    CRYO_ASSIGN_OR_RETURN(UniqueFd dir, Open(kStagingDir));
    const std::string name = absl::StrCat(".probe", std::string(1, kSep), RandomHex(6));
    const std::string probe = fs::Join(staging(), name);
    int fd = ::openat(dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                      0600);
    if (fd < 0) {
      int e = errno;
      if (e == EROFS) {
        return absl::FailedPreconditionError(
            absl::StrCat("checkpoint store ", opts_.root, " is read-only"));
      }
      return Annotate(ErrnoStatus(e, probe), "checkpoint store is not writable");
    }
    ::close(fd);
    ::unlinkat(dir.get(), name.c_str(), 0);
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> FreeBytes() override {
    CRYO_RETURN_IF_ERROR(Ready());
    return fs::FreeBytes(opts_.root);
  }
  bool durable() const override { return opts_.fsync; }

  absl::Status CommitJobCheckpoint(const JobCheckpoint& jc) override { return jobs_.Commit(jc); }
  absl::StatusOr<JobCheckpoint> GetJobCheckpoint(const std::string& ns, const std::string& job,
                                                 const std::string& id) override {
    return jobs_.Get(ns, job, id);
  }
  absl::StatusOr<std::vector<JobCheckpoint>> ListJobCheckpoints(const std::string& ns,
                                                                const std::string& job) override {
    return jobs_.List(ns, job);
  }
  absl::Status DeleteJobCheckpoint(const std::string& ns, const std::string& job,
                                   const std::string& id) override {
    return jobs_.Delete(ns, job, id);
  }
  absl::Status MarkJobArrival(const std::string& ns, const std::string& job,
                              const JobArrival& a) override {
    return jobs_.MarkArrival(ns, job, a);
  }
  absl::Status RemoveJobArrival(const std::string& ns, const std::string& job,
                                const std::string& member) override {
    return jobs_.RemoveArrival(ns, job, member);
  }
  absl::StatusOr<std::vector<JobArrival>> JobArrivals(const std::string& ns,
                                                      const std::string& job) override {
    return jobs_.Arrivals(ns, job);
  }

 private:
  // Parsed manifests, by checkpoint id, with the identity of the file they were read from: a
  // published manifest does not change, and List (which every plan at a stop, every periodic
  // checkpoint's write and every `cryo list` runs) then costs an open and an fstat per
  // checkpoint instead of a read and a parse of up to 16 MiB. Any change to the file (a new
  // inode, size, mtime or ctime) reads it again; the damaged mark is read every time.
  struct FileKey {
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns, ctime_ns;
    bool operator==(const FileKey&) const = default;
  };
  static FileKey KeyOf(const struct stat& st) {
    return {st.st_dev, st.st_ino, st.st_size,
            int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
            int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec};
  }
  static absl::StatusOr<Manifest> ParseManifestOf(const std::string& id, const std::string& text) {
    auto parsed = ParseManifest(text);
    if (!parsed.ok()) return Annotate(parsed.status(), absl::StrCat("checkpoint '", id, "'"));
    if (parsed->id != id) {
      return absl::DataLossError(
          absl::StrCat("checkpoint directory '", id, "' holds a manifest for '", parsed->id, "'"));
    }
    return parsed;
  }
  // The manifest of this file identity as parsed before, or why it was refused.
  std::optional<absl::StatusOr<Manifest>> CachedManifest(const std::string& id,
                                                         const struct stat& st) {
    absl::MutexLock l(&cache_mu_);
    auto it = cache_.find(id);
    if (it == cache_.end() || !(it->second.first == KeyOf(st))) return std::nullopt;
    return it->second.second;
  }
  void KeepManifest(const std::string& id, const struct stat& st,
                    const absl::StatusOr<Manifest>& m) {
    absl::MutexLock l(&cache_mu_);
    // Bounded: a store of more checkpoints than this reads the rest each time.
    if (cache_.size() >= kMaxCachedManifests && !cache_.count(id)) return;
    cache_[id] = {KeyOf(st), m};
  }
  void ForgetManifest(const std::string& id) {
    absl::MutexLock l(&cache_mu_);
    cache_.erase(id);
  }
  void ForgetManifestsBut(const std::set<std::string>& ids) {
    absl::MutexLock l(&cache_mu_);
    std::erase_if(cache_, [&](const auto& kv) { return !ids.count(kv.first); });
  }
  static constexpr size_t kMaxCachedManifests = 4096;

  LocalStoreOptions opts_;
  std::string node_;
  JobRecords jobs_;
  absl::Mutex cache_mu_;
  std::map<std::string, std::pair<FileKey, absl::StatusOr<Manifest>>> cache_
      ABSL_GUARDED_BY(cache_mu_);
  absl::Mutex mu_;
  // The root directory's identity when last seen (Ready).
  dev_t dev_ ABSL_GUARDED_BY(mu_) = 0;
  ino_t ino_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status LocalStaged::Abort() {
  if (done_) return absl::OkStatus();
  done_ = true;
  CRYO_ASSIGN_OR_RETURN(UniqueFd dir, store_->Open(kStagingDir));
  return fs::RemoveTreeAt(dir.get(), name_, dir_);
}

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
  CRYO_ASSIGN_OR_RETURN(UniqueFd stage, store_->Open(kStagingDir));
  CRYO_ASSIGN_OR_RETURN(UniqueFd pub, store_->Open(kPublishedDir));
  if (::renameat2(stage.get(), name_.c_str(), pub.get(), id_.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat("checkpoint '", id_, "' already exists"));
    }
    return ErrnoStatus(errno,
                       absl::StrCat("rename ", dir_, " -> ", fs::Join(store_->published(), id_)));
  }
  done_ = true;
  if (::fsync(pub.get()) != 0 && errno != EINVAL) {
    return ErrnoStatus(errno, absl::StrCat("fsync ", store_->published()));
  }
  return absl::OkStatus();
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
