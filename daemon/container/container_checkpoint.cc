#include "daemon/container/container_checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/container/archive.h"
#include "daemon/container/checkpoint_image.h"
#include "daemon/container/rootfs.h"
#include "daemon/store/checksum.h"
#include "lib/base/fs.h"
#include "lib/base/log.h"
#include "lib/base/poll.h"
#include "lib/base/status.h"
#include "lib/contract/annotations.h"
#include "lib/contract/archive.h"
#include "lib/contract/cryo_init_protocol.h"
#include "lib/contract/job.h"
#include "lib/contract/labels.h"

namespace cryo::container {

absl::StatusOr<std::vector<store::ManifestFile>> SaveWritableLayer(const proc::ProcReader& proc,
                                                                   const ContainerTarget& c,
                                                                   const std::string& dir) {
  CRYO_ASSIGN_OR_RETURN(std::string mountinfo, fs::ReadFile(proc.PidPath(c.init_pid, "mountinfo")));
  CRYO_ASSIGN_OR_RETURN(auto mounts, ParseMountInfo(mountinfo));
  CRYO_ASSIGN_OR_RETURN(std::string upper, OverlayUpperDir(mounts));
  CRYO_RETURN_IF_ERROR(fs::MakeDirs(fs::Join(dir, contract::checkpoint::kContainerDir), 0700));
  const std::string tar = fs::Join(dir, contract::checkpoint::kRootfsDiff);
  const std::string deleted = fs::Join(dir, contract::checkpoint::kDeletedFiles);
  std::vector<std::string> excluded = MountPointsBelowRoot(mounts);
  excluded.push_back(contract::checkpoint::kCryoInitDir);  // cryo-init's mount point: ours
  CRYO_ASSIGN_OR_RETURN(RootfsDiff diff, WriteRootfsDiff(upper, excluded, tar, deleted));
  CRYO_LOG(Info) << "writable layer of " << c.info.id.substr(0, 13) << ": " << diff.entries
                 << " entries, " << diff.deleted.size() << " deletions, " << diff.tar_bytes
                 << " bytes";
  std::vector<store::ManifestFile> out;
  for (const char* rel : {contract::checkpoint::kRootfsDiff, contract::checkpoint::kDeletedFiles}) {
    CRYO_ASSIGN_OR_RETURN(FileDigest dg, HashFile(fs::Join(dir, rel)));
    out.push_back({rel, dg.size, dg.checksum});
  }
  return out;
}

store::ContainerSection SectionOf(const ContainerTarget& c, const std::string& runtime_name) {
  store::ContainerSection s;
  s.id = c.info.id;
  s.name = c.info.name;
  s.image = c.info.image;
  s.image_ref = c.info.image_ref;
  s.labels = c.info.labels;
  s.annotations = c.info.annotations;
  s.runtime = runtime_name;
  s.created_at_ns = c.info.created_at_ns;
  s.stdout_pipe = c.stdout_pipe;
  s.stderr_pipe = c.stderr_pipe;
  s.rootfs_diff = contract::checkpoint::kRootfsDiff;
  s.deleted_files = contract::checkpoint::kDeletedFiles;
  return s;
}

absl::Status ExportKubeletArchive(const store::Manifest& m, const ContainerTarget& c,
                                  const std::string& dir, const std::string& dump_log,
                                  const std::string& path,
                                  const std::map<std::string, std::string>& referred) {
  ArchiveInput in;
  in.images_dir = fs::Join(dir, store::kImagesDir);
  in.rootfs_diff_tar = fs::Join(dir, contract::checkpoint::kRootfsDiff);
  in.deleted_files = fs::Join(dir, contract::checkpoint::kDeletedFiles);
  in.dump_log = dump_log;
  // CRIU writes its statistics beside its log (its work directory).
  in.stats_dump = fs::Join(dump_log.substr(0, dump_log.rfind('/')), contract::archive::kStatsDump);
  const absl::Time created = absl::FromUnixNanos(c.info.created_at_ns);
  // The fields and names containerd and CRI-O write, as checkpointctl reads them: rootfsImage is
  // the image as the user named it, rootfsImageRef what it resolved to.
  in.config_dump = {
      {"id", c.info.id},
      {"name", c.info.name},
      {"rootfsImage", c.info.image},
      {"rootfsImageRef", c.info.image_ref},
      {"rootfsImageName", c.info.image},
      {"runtime", "runc"},
      {"createdTime", absl::FormatTime(absl::RFC3339_full, created, absl::UTCTimeZone())},
      {"checkpointedTime", m.created_at},
      // Where the same checkpoint lives in cryo's store, for `cryo restore`-style tooling.
      {"cryo.checkpoint_id", m.id}};
  in.spec_dump = c.info.runtime_spec.is_null() ? nlohmann::json::object() : c.info.runtime_spec;
  // containerd's "status" (what checkpointctl shows as CREATED) and CRI's ContainerStatus as
  // "status.dump" (what CRI-O and containerd 2 restore from).
  in.extra[contract::archive::kStatus] = nlohmann::json{{"CreatedAt", c.info.created_at_ns},
                                                        {"StartedAt", c.info.created_at_ns},
                                                        {"FinishedAt", 0},
                                                        {"ExitCode", 0},
                                                        {"Pid", c.init_pid},
                                                        {"Reason", ""},
                                                        {"Message", ""}}
                                             .dump(2) +
                                         "\n";
  in.extra[contract::archive::kStatusDump] =
      nlohmann::json{{"id", c.info.id},
                     {"metadata", {{"name", c.info.name}}},
                     {"state", 1},  // CONTAINER_RUNNING at the checkpoint
                     {"created_at", c.info.created_at_ns},
                     {"started_at", c.info.created_at_ns},
                     {"image", {{"image", c.info.image}}},
                     {"image_ref", c.info.image_ref},
                     {"labels", c.info.labels},
                     {"annotations", c.info.annotations},
                     {"log_path", c.info.log_path}}
          .dump(2) +
      "\n";
  // cryo's manifest, with the paths the archive uses, so cryo can restore from the archive alone.
  store::Manifest in_archive = m;
  for (auto& f : in_archive.files) {
    const std::string to = ArchivePathOfStoreFile(f.path);
    if (absl::StartsWith(to, absl::StrCat(contract::archive::kCryoDir, "/"))) {
      // cryo's own (the GPU fast path's data), whole: an image must hold all of its data. CRIU's
      // images and the writable layer are added from their directories below.
      ArchiveFile af{to, fs::Join(dir, f.path), f.size, kChecksumChunk, {}};
      for (const auto& [id, chunks] : f.refs) {
        auto where = referred.find(id);
        if (where == referred.end()) {
          return absl::FailedPreconditionError(
              absl::StrCat(f.path, " refers to checkpoint ", id, ", which was not found"));
        }
        for (uint32_t j : chunks) af.elsewhere[j] = fs::Join(where->second, f.path);
      }
      in.files.push_back(std::move(af));
      f.refs.clear();
    }
    f.path = to;
  }
  in.extra[contract::archive::kCryoManifest] = store::ManifestToJson(in_archive);
  return WriteCheckpointArchive(in, path);
}

void TellInitCheckpointed(const proc::ProcReader& proc, pid_t init_pid) {
  TellInit(proc, init_pid, CRYO_INIT_VALUE_CHECKPOINTED, "");
}

namespace {

// The container's stderr is its log: a line there shows in `kubectl logs`.
void LogToContainer(const proc::ProcReader& proc, pid_t init_pid, const std::string& why) {
  int fd = ::open(proc.PidPath(init_pid, "fd/2").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  std::string line = absl::StrCat("cryo: ", why, "\n");
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

}  // namespace

void TellInitResumesEarlier(const proc::ProcReader& proc, pid_t init_pid, absl::Duration lost,
                            const std::string& why) {
  LogToContainer(proc, init_pid, why);
  const int64_t s = std::clamp<int64_t>(absl::ToInt64Seconds(lost), 0, CRYO_INIT_LOST_MAX_S);
  TellInit(proc, init_pid, CRYO_INIT_VALUE_RESUMES_EARLIER + static_cast<int>(s), "");
}

void TellInit(const proc::ProcReader& proc, pid_t init_pid, int value, const std::string& why) {
  if (value <= 0 && !why.empty()) LogToContainer(proc, init_pid, why);
  // Queued before cryo-init set its signal mask, the signal would kill it: it is ready once
  // it waits for signals (it does so microseconds after it starts, long before any restore).
  PollUntil(
      [&] {
        if (proc.Link(init_pid, "exe").empty()) return true;  // gone: nobody to tell
        auto w = fs::ReadFile(proc.PidPath(init_pid, "wchan"));
        return w.ok() && absl::StrContains(*w, "sigtimedwait");
      },
      absl::Seconds(5), absl::Milliseconds(5));
  union sigval v;
  v.sival_int = value;
  if (::sigqueue(init_pid, CRYO_INIT_SIGNAL, v) != 0) {
    CRYO_LOG(Warning) << "telling cryo-init (pid " << init_pid
                      << ") the restore result: " << strerror(errno);
  }
}

absl::StatusOr<std::vector<OptedIn>> OptedInContainers(runtime::ContainerRuntime& rt,
                                                       const std::string& prefix,
                                                       const std::string& reason) {
  CRYO_ASSIGN_OR_RETURN(auto running, rt.ListRunning());
  std::vector<OptedIn> out;
  for (const auto& c : running) {
    auto on_stop =
        c.annotations.find(contract::Key(prefix, contract::container::kCheckpointOnStop));
    OptedIn o;
    o.checkpoint_on_stop = on_stop != c.annotations.end() && on_stop->second == "true";
    auto managed = c.annotations.find(contract::Key(prefix, contract::container::kManaged));
    auto every = c.annotations.find(contract::Key(prefix, contract::container::kCheckpointEvery));
    int64_t every_s = 0;
    // The shim wrote it checked, in seconds; anything else is not the shim's and is ignored.
    if (managed != c.annotations.end() && managed->second == "true" &&
        every != c.annotations.end() && absl::SimpleAtoi(every->second, &every_s) && every_s >= 0) {
      o.every = absl::Seconds(every_s);
    }
    if (!o.checkpoint_on_stop && !o.every) continue;
    if (auto g = c.annotations.find(contract::k8s::kPodTerminationGracePeriod);
        g == c.annotations.end() || !absl::SimpleAtoi(g->second, &o.grace_s)) {
      o.grace_s = -1;
    }
    if (c.created_at_ns > 0) o.created = absl::FromUnixNanos(c.created_at_ns);
    o.container_id = c.id;
    auto wk = c.annotations.find(contract::Key(prefix, contract::container::kWorkloadKey));
    if (wk != c.annotations.end()) o.workload = wk->second;
    for (const char* k : contract::k8s::kContainerIdentity) {
      auto it = c.labels.find(k);
      if (it != c.labels.end()) o.labels[k] = it->second;
    }
    o.labels[contract::Key(prefix, contract::label::kReason)] = reason;
    if (auto job = c.annotations.find(contract::Key(prefix, contract::container::kJob));
        job != c.annotations.end() && !job->second.empty()) {
      o.job = job->second;
      o.job_namespace = o.labels[contract::k8s::kPodNamespace];
      auto get = [&](const char* key) {
        auto it = c.annotations.find(contract::Key(prefix, key));
        return it == c.annotations.end() ? std::string() : it->second;
      };
      o.job_member = get(contract::container::kJobMember);
      if (!absl::SimpleAtoi(get(contract::container::kJobSize), &o.job_size)) o.job_size = 0;
    }
    auto criu = contract::ParseCriuAnnotations(c.annotations, prefix);
    if (criu.ok()) {
      o.criu = *criu;
    } else {
      CRYO_LOG(Warning) << "container " << c.id.substr(0, 13) << ": " << criu.status()
                        << "; node defaults used";
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace cryo::container
