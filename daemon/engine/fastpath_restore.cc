// The GPU fast path's way back (docs/gpu.md, "Fast path"): the undo that refills processes a
// checkpoint left drained, from the journal's records (Engine::RefillFastpath, also run by
// recovery and by a failed publish), and a restore's refill of the restored processes
// (gpu_refill), reading through to earlier checkpoints for incremental GPU data.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "daemon/container/target.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/states.h"
#include "daemon/gpu/fastpath_client.h"
#include "daemon/gpu/fastpath_cut.h"
#include "daemon/gpu/host_copy.h"
#include "lib/base/chunked_xxh3.h"
#include "lib/base/fd.h"
#include "lib/base/fs.h"
#include "lib/base/log.h"
#include "lib/base/parallel.h"
#include "lib/base/status.h"
#include "lib/contract/gpu_fastpath_messages.h"

namespace cryo::engine {
namespace {

// Process f's files as manifest `m` lists them, in order; DATA_LOSS for one it does not list.
absl::StatusOr<std::vector<const store::ManifestFile*>> ListedFastpathFiles(
    const store::Manifest& m, const gpu::FastpathProcess& f) {
  std::vector<const store::ManifestFile*> listed;
  for (int k = 0; k < f.files; ++k) {
    const std::string name = gpu::FastpathFileName(f.ns_pid, k);
    auto it = std::find_if(m.files.begin(), m.files.end(),
                           [&](const store::ManifestFile& mf) { return mf.path == name; });
    if (it == m.files.end())
      return absl::DataLossError(absl::StrCat("the manifest lists no ", name));
    listed.push_back(&*it);
  }
  return listed;
}

// Whether any of them refers to another checkpoint (incremental: read through on restore).
bool Refers(const std::vector<const store::ManifestFile*>& listed) {
  return std::any_of(listed.begin(), listed.end(),
                     [](const store::ManifestFile* mf) { return !mf->refs.empty(); });
}

}  // namespace

void Engine::RefillFastpath(const std::vector<gpu::FastpathProcess>& procs, const std::string& dir,
                            const std::vector<int>& memfds, const store::Manifest* published) {
  if (procs.empty()) return;
  if (d_.fastpath == nullptr) {
    CRYO_LOG(Error) << procs.size()
                    << " processes wait for their GPU memory but the fast path is off: "
                       "cryo-gpuctl fastpath-refill brings it back by hand";
    return;
  }
  // Which of them wait for their memory, and in what state.
  using contract::gpu_fastpath::State;
  std::vector<std::optional<State>> state(procs.size());
  EachInParallel(procs.size(), [&](size_t i) -> absl::Status {
    auto st = d_.fastpath->Status(procs[i]);
    // Gone (killed, or it ended): nothing waits for this memory.
    if (!st.ok()) CRYO_LOG(Info) << "fast path of pid " << procs[i].pid << ": " << st.status();
    if (st.ok()) state[i] = st->state;
    return absl::OkStatus();
  });
  std::vector<gpu::FastpathProcess> todo, running;
  std::vector<std::vector<UniqueFd>> files;
  for (size_t i = 0; i < procs.size(); ++i) {
    if (!state[i]) continue;
    if (*state[i] == State::kRunning) {
      running.push_back(procs[i]);
      continue;
    }
    std::vector<UniqueFd> fds;
    if (*state[i] == State::kSaved && procs[i].memory) {
      UniqueFd m(i < memfds.size() && memfds[i] >= 0 ? ::dup(memfds[i]) : -1);
      if (!m.ok()) {
        // Only cryod's memory held it, and that cryod is gone: the job cannot go on. Ended, it
        // is restarted from its newest good checkpoint instead of hanging with its gate shut.
        CRYO_LOG(Error) << "fast path of pid " << procs[i].pid << ": its GPU memory was only in "
                        << "the memory of a cryod that stopped; it is lost, and the process is "
                        << "ended so that its job resumes from its newest good checkpoint";
        ::kill(procs[i].pid, SIGKILL);
        continue;
      }
      fds.push_back(std::move(m));
    } else if (*state[i] == State::kSaved && published != nullptr) {
      auto through = ReadThrough(*published, dir, procs[i]);
      if (!through.ok()) {
        CRYO_LOG(Error) << "fast path of pid " << procs[i].pid << ": its GPU memory cannot be "
                        << "read back: " << through.status();
        continue;
      }
      if (through->get() >= 0) {
        todo.push_back(procs[i]);
        todo.back().memory = true;
        files.emplace_back();
        files.back().push_back(*std::move(through));
        continue;
      }
    }
    if (*state[i] == State::kSaved && fds.empty() && !procs[i].memory) {
      auto opened = gpu::OpenFastpathFiles(dir, procs[i].ns_pid, procs[i].files, false);
      if (!opened.ok()) {
        CRYO_LOG(Error) << "fast path of pid " << procs[i].pid << ": its GPU memory is only in "
                        << "files that cannot be opened: " << opened.status();
        continue;
      }
      fds = *std::move(opened);
    }
    todo.push_back(procs[i]);
    files.push_back(std::move(fds));
  }
  if (todo.empty()) return;
  // An undo's wait ends only when cryod stops for good (its grace passed): until then the job's
  // memory is what it waits for.
  absl::Status r = gpu::RefillTogether(*d_.fastpath, todo, cfg_.fastpath.threads, Borrow(files), {},
                                       running, [this] { return PastStopGrace(); });
  files.clear();
  if (r.ok()) {
    CRYO_LOG(Info) << "fast path: GPU memory of " << todo.size() << " processes refilled";
  } else {
    CRYO_LOG(Error) << "fast path: refill failed: " << r;
  }
}

absl::Status Engine::CheckReferences(const store::Manifest& m) {
  // Each checkpoint referred to is looked up once (every file of every process may name it).
  struct Held {
    absl::StatusOr<std::string> where;
    absl::StatusOr<store::Manifest> manifest;
  };
  std::map<std::string, Held> looked_up;
  for (const auto& mf : m.files) {
    for (const auto& [id, list] : mf.refs) {
      const uint64_t end =
          std::min(mf.size, (uint64_t{*std::max_element(list.begin(), list.end())} + 1) *
                                xxh3chunked::kChunk);
      auto found = looked_up.find(id);
      if (found == looked_up.end()) {
        found = looked_up.emplace(id, Held{d_.store->LocalPath(id), d_.store->Get(id)}).first;
      }
      const auto& where = found->second.where;
      const auto& held = found->second.manifest;
      struct stat st;
      std::string why;
      if (!where.ok() || !held.ok()) {
        why = std::string(where.ok() ? held.status().message() : where.status().message());
      } else if (held->workload != m.workload) {
        // cryod refers only within a workload: anything else would read another job's data
        // into this one.
        return absl::PermissionDeniedError(absl::StrCat(mf.path, " refers to checkpoint ", id,
                                                        " of workload ", held->workload,
                                                        ", not its own (", m.workload, ")"));
      } else if (::lstat(fs::Join(*where, mf.path).c_str(), &st) != 0) {
        why = std::strerror(errno);
      } else if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < end) {
        why = absl::StrCat("not a file of at least ", end, " bytes");
      }
      if (!why.empty()) {
        return absl::DataLossError(absl::StrCat(mf.path, " refers to ", list.size(),
                                                " chunks of checkpoint ", id, ": ", why));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<gpu::ChunkSources>> Engine::FastpathSources(
    const store::Manifest& m, const std::string& dir, const gpu::FastpathProcess& f,
    std::vector<UniqueFd>* open) {
  CRYO_ASSIGN_OR_RETURN(std::vector<const store::ManifestFile*> listed, ListedFastpathFiles(m, f));
  // With direct I/O where the file system takes it, as the library reads them: two restores'
  // buffered reads at once from one disk took 1.5x twice one's (two H200s, 2026-11-30).
  auto open_file = [&](const std::string& d, const std::string& name) -> absl::StatusOr<int> {
    const std::string path = fs::Join(d, name);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_DIRECT));
    if (fd.get() < 0 && errno == EINVAL) {
      fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    }
    if (fd.get() < 0) return ErrnoStatus(errno, path);
    open->push_back(std::move(fd));
    return open->back().get();
  };
  std::vector<gpu::ChunkSources> src(listed.size());
  for (size_t k = 0; k < listed.size(); ++k) {
    const store::ManifestFile& mf = *listed[k];
    CRYO_ASSIGN_OR_RETURN(int own, open_file(dir, mf.path));
    src[k].expected = {mf.size, mf.checksum};
    if (mf.chunks.empty()) {
      // Written by the library: read whole, checked whole.
      if (!mf.refs.empty()) {
        return absl::DataLossError(absl::StrCat(mf.path, " has no chunk digests to read it by"));
      }
      src[k].fds = {own};
      continue;
    }
    src[k].fds.assign(mf.chunks.size(), own);
    src[k].chunks = mf.chunks;
    for (const auto& [id, list] : mf.refs) {
      auto where = d_.store->LocalPath(id);
      absl::StatusOr<int> fd = where.ok() ? open_file(*where, mf.path) : where.status();
      if (!fd.ok()) {
        return absl::DataLossError(absl::StrCat("checkpoint ", id, ", which holds part of ",
                                                mf.path,
                                                ", cannot be read: ", fd.status().message()));
      }
      for (uint32_t j : list) src[k].fds[j] = *fd;
    }
  }
  return src;
}

absl::StatusOr<UniqueFd> Engine::ReadThrough(const store::Manifest& m, const std::string& dir,
                                             const gpu::FastpathProcess& f) {
  CRYO_ASSIGN_OR_RETURN(std::vector<const store::ManifestFile*> listed, ListedFastpathFiles(m, f));
  if (!Refers(listed)) return UniqueFd();
  // Each chunk from the file that holds it: this checkpoint's, or the same file of the one it
  // refers to (at the same offset), each checked against the digest this manifest recorded.
  std::vector<UniqueFd> open;
  CRYO_ASSIGN_OR_RETURN(std::vector<gpu::ChunkSources> src, FastpathSources(m, dir, f, &open));
  const uint64_t avail = gpu::AvailableHostMemory();
  if (avail < f.bytes + (1ull << 30)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "reading the GPU data of pid ", f.ns_pid, " back needs ", f.bytes, " bytes of cryod's ",
        "memory (it refers to an earlier checkpoint); cryod can have ", avail));
  }
  CRYO_ASSIGN_OR_RETURN(
      UniqueFd memfd, gpu::NewHostCopy(f.bytes, cfg_.fastpath.threads, cfg_.fastpath.host_copy_fs));
  CRYO_RETURN_IF_ERROR(gpu::ReadHostCopy(memfd.get(), f.bytes, gpu::kFastpathStripeBytes, src));
  return memfd;
}

std::vector<char> Engine::FillCandidates(const RestoreState& s) {
  std::vector<char> out(s.m.gpu_fastpath.size(), 0);
  // Only onto the GPUs it was checkpointed on (a map of each onto itself, or none): the park's
  // GPU is then the one the library re-creates its memory on, which it checks before it copies.
  const bool moved =
      std::any_of(s.map.begin(), s.map.end(), [](const auto& kv) { return kv.first != kv.second; });
  if (moved) {
    CRYO_LOG(Info) << "restore " << s.m.id
                   << ": the GPU data is not read into GPU memory first: the restore maps it "
                      "onto other GPUs";
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const gpu::FastpathProcess& f = s.m.gpu_fastpath[i];
    if (f.files == 0 || f.bytes == 0 || f.device.empty()) continue;
    // An incremental checkpoint's chunks come from several checkpoints' files: read ahead.
    auto listed = ListedFastpathFiles(s.m, f);
    out[i] = listed.ok() && !Refers(*listed);
  }
  return out;
}

void Engine::StartFills(RestoreState& s, const std::vector<char>& filling) {
  (void)EachInParallel(filling.size(), [&](size_t i) -> absl::Status {
    if (!filling[i]) return absl::OkStatus();
    const gpu::FastpathProcess& f = s.m.gpu_fastpath[i];
    absl::StatusOr<std::vector<UniqueFd>> files =
        gpu::OpenFastpathFiles(s.dir, f.ns_pid, f.files, false);
    std::unique_ptr<gpu::Parker> p;
    absl::Status st = files.status();
    if (st.ok()) {
      auto started = gpu::Parker::Start(cfg_.fastpath.parker, f.device, f.bytes,
                                        static_cast<uint32_t>(f.files));
      st = started.status();
      if (st.ok()) p = *std::move(started);
    }
    if (st.ok()) {
      std::vector<int> fds;
      for (const UniqueFd& fd : *files) fds.push_back(fd.get());
      st = p->BeginFill(fds, gpu::kFastpathStripeBytes, f.bytes);
    }
    if (!st.ok()) {
      // The library reads the files at the refill, as without it.
      CRYO_LOG(Info) << "restore " << s.m.id << ": the GPU data of pid " << f.ns_pid
                     << " is not read into GPU memory first (GPU " << f.device
                     << "): " << st.message();
      return absl::OkStatus();
    }
    CRYO_LOG(Info) << "restore " << s.m.id << ": reading " << f.bytes
                   << " bytes of GPU data of pid " << f.ns_pid << " into GPU memory on " << f.device
                   << " while the processes are restored";
    s.fills[i] = std::move(p);
    return absl::OkStatus();
  });
}

absl::Status Engine::StartGpuFills(RestoreState& s) {
  // From right after the checks on: the parking processes start (each opens the driver and takes
  // its memory) and read beside verify, CRIU's restore and the driver's. They only read into
  // memory of cryod's own; nothing of it reaches the job before every file is found to be what
  // the checkpoint recorded (gpu_refill), and a restore that fails before then frees it.
  s.filling = FillCandidates(s);
  if (std::find(s.filling.begin(), s.filling.end(), 1) != s.filling.end()) {
    s.fills.resize(s.m.gpu_fastpath.size());
    s.fills_starting = std::jthread([this, &s] { StartFills(s, s.filling); });
  }
  return absl::OkStatus();
}

absl::Status Engine::PrefetchGpuData(RestoreState& s) {
  // The read ahead leaves the processes read into GPU memory (gpu_fill) to it.
  std::vector<char> filling = s.filling;
  filling.resize(s.m.gpu_fastpath.size(), 0);
  if (cfg_.fastpath.staging == nullptr) return absl::OkStatus();
  std::vector<GpuPrefetch::Process> procs(s.m.gpu_fastpath.size());
  std::vector<UniqueFd> open;
  bool any = false;
  for (size_t i = 0; i < procs.size(); ++i) {
    const gpu::FastpathProcess& f = s.m.gpu_fastpath[i];
    if (f.files == 0 || f.bytes == 0) continue;
    if (filling[i]) continue;  // read into GPU memory
    any = true;
    auto src = FastpathSources(s.m, s.dir, f, &open);
    if (!src.ok()) {
      // The refill meets it again, and fails the restore with it.
      CRYO_LOG(Warning) << "restore " << s.m.id
                        << ": the GPU data is not read ahead: " << src.status();
      return absl::OkStatus();
    }
    procs[i] = {f.bytes, *std::move(src)};
  }
  if (!any) return absl::OkStatus();
  auto started = GpuPrefetch::Start(*cfg_.fastpath.staging, std::move(procs), std::move(open),
                                    gpu::kFastpathStripeBytes);
  if (!started.ok()) {
    CRYO_LOG(Info) << "restore " << s.m.id << ": the library reads the GPU data from the store: "
                   << started.status().message();
    return absl::OkStatus();
  }
  s.prefetch = *std::move(started);
  CRYO_LOG(Info) << "restore " << s.m.id << ": reading " << s.prefetch->bytes()
                 << " bytes of GPU data into staging memory while the processes are restored";
  return absl::OkStatus();
}

bool Engine::FollowsReads(RestoreState& s) {
  std::vector<char> follows(s.fast.size(), 1);
  EachInParallel(s.fast.size(), [&](size_t i) -> absl::Status {
    if (!s.prefetch->copy(i).ok()) return absl::OkStatus();
    auto st = d_.fastpath->Status(s.fast[i]);
    follows[i] = st.ok() && st->version >= contract::gpu_fastpath::kVersionFollow;
    return absl::OkStatus();
  });
  return std::all_of(follows.begin(), follows.end(), [](char c) { return c != 0; });
}

void Engine::LogPrefetch(RestoreState& s, const absl::Status& read, absl::Duration after) {
  const double secs = absl::ToDoubleSeconds(s.prefetch->read_time());
  CRYO_LOG(Info) << "restore " << s.m.id << ": " << s.prefetch->bytes()
                 << " bytes of GPU data read into staging memory in "
                 << absl::ToInt64Milliseconds(s.prefetch->read_time()) << " ms ("
                 << (secs > 0 ? s.prefetch->bytes() / secs / 1e9 : 0) << " GB/s)"
                 << (after > absl::ZeroDuration()
                         ? absl::StrCat(", the libraries copying behind it; done ",
                                        absl::ToInt64Milliseconds(after),
                                        " ms after they were given it")
                         : ", then copied to the GPU")
                 << ": " << read;
}

absl::Status Engine::RefillRestoredGpus(RestoreState& s) {
  s.fast = s.m.gpu_fastpath;
  uint64_t total = 0;
  for (auto& f : s.fast) {
    total += f.bytes;
    // Restored processes keep their pids inside; in a container their host pids are new.
    f.pid = s.ctr ? container::HostPidInNamespace(*d_.proc, s.ctr->init_pid, f.ns_pid) : f.ns_pid;
  }
  s.clock->Begin(Stage::kGpuRefill, total);
  std::map<std::string, FileDigest> recorded;
  for (const auto& mf : s.m.files) recorded[mf.path] = {mf.size, mf.checksum};
  std::vector<std::vector<UniqueFd>> files(s.fast.size());
  std::vector<std::vector<FileDigest>> expected(s.fast.size());
  absl::Status st;
  for (size_t i = 0; i < s.fast.size() && st.ok(); ++i) {
    const gpu::FastpathProcess& f = s.fast[i];
    if (f.pid <= 0) {
      st = absl::InternalError(absl::StrCat("restored process ", f.ns_pid, " not found"));
      break;
    }
    for (int k = 0; k < f.files && st.ok(); ++k) {
      auto it = recorded.find(gpu::FastpathFileName(f.ns_pid, k));
      if (it == recorded.end()) {
        st = absl::DataLossError(
            absl::StrCat("the manifest lists no ", gpu::FastpathFileName(f.ns_pid, k)));
      } else {
        expected[i].push_back(it->second);
      }
    }
  }
  // Read into GPU memory (gpu_restore_into_gpu): refilled from there within the GPU, once every
  // file is found to hold what the checkpoint recorded. A read that failed on its own leaves the
  // files to the library; a file that differs fails the restore.
  std::vector<char> ahead(s.fast.size(), 0);
  if (s.fills_starting.joinable()) s.fills_starting.join();
  for (size_t i = 0; i < s.fills.size() && i < s.fast.size() && st.ok(); ++i) {
    if (s.fills[i] == nullptr) continue;
    std::unique_ptr<gpu::Parker> p = std::move(s.fills[i]);
    auto got = p->WaitFilled();
    if (got.ok() && *got != expected[i]) {
      for (size_t k = 0; k < got->size() && k < expected[i].size(); ++k) {
        if ((*got)[k] == expected[i][k]) continue;
        st = absl::DataLossError(absl::StrCat(
            gpu::FastpathFileName(s.fast[i].ns_pid, k), " does not hold what the checkpoint ",
            "recorded (size ", (*got)[k].size, ", checksum ", (*got)[k].checksum, "; recorded ",
            expected[i][k].size, ", ", expected[i][k].checksum, ")"));
        break;
      }
      if (st.ok()) st = absl::DataLossError("the GPU data's files differ from the checkpoint's");
      break;
    }
    absl::Status use = got.status();
    if (use.ok()) {
      auto status = d_.fastpath->Status(s.fast[i]);
      if (!status.ok()) {
        use = status.status();
      } else if (status->version < contract::gpu_fastpath::kVersionFill) {
        use = absl::FailedPreconditionError(absl::StrCat("its library speaks version ",
                                                         status->version, ", the read needs ",
                                                         contract::gpu_fastpath::kVersionFill));
      }
    }
    if (!use.ok()) {
      CRYO_LOG(Warning) << "restore " << s.m.id << ": pid " << s.fast[i].ns_pid
                        << " reads its GPU data from the store itself: " << use.message();
      continue;
    }
    files[i].emplace_back(::fcntl(p->fd(), F_DUPFD_CLOEXEC, 3));
    if (!files[i].back().ok()) {
      st = ErrnoStatus(errno, "a descriptor of the GPU memory read into");
      break;
    }
    s.fast[i].filled = true;
    s.fast[i].park = p->bytes();
    s.fast[i].device = p->device();
    expected[i].clear();
    ahead[i] = 1;
    s.fills[i] = std::move(p);  // held until the refill is done
  }
  // Read ahead into staging memory (gpu_prefetch): refilled from there. A library that follows
  // (gpu_fastpath.h, "Following") is given the slots now and copies behind the read, its gate
  // opening on the read's verdict; an older one once the read is done and checked.
  bool follow = false;
  absl::Time waited_from;
  if (st.ok() && s.prefetch != nullptr) {
    follow = FollowsReads(s);
    absl::Status read = follow ? absl::OkStatus() : s.prefetch->Wait();
    if (!follow) LogPrefetch(s, read, absl::Duration());
    std::vector<std::vector<UniqueFd>> given(s.fast.size());
    for (size_t i = 0; i < s.fast.size() && read.ok(); ++i) {
      if (!s.prefetch->copy(i).ok()) continue;
      for (int fd : {s.prefetch->copy(i).get(), follow ? s.prefetch->progress(i) : -1}) {
        if (fd < 0) continue;
        given[i].emplace_back(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
        if (!given[i].back().ok()) read = ErrnoStatus(errno, "a descriptor of the staging memory");
      }
    }
    if (read.ok()) {
      for (size_t i = 0; i < s.fast.size(); ++i) {
        if (given[i].empty()) continue;
        files[i] = std::move(given[i]);
        s.fast[i].memory = true;
        s.fast[i].follow = follow;
        expected[i].clear();
        ahead[i] = 1;
      }
      waited_from = absl::Now();
    } else if (absl::IsDataLoss(read)) {
      st = read;
    } else {
      // Not the data's fault: the library reads the files instead (the reset waits for the read).
      s.prefetch.reset();
      follow = false;
    }
  }
  // Incremental: a process whose files refer to an earlier checkpoint's is read through into
  // cryod's memory, checked there, and refilled from it; all of them at once, within the memory
  // the node has for them. The others' files the library reads itself.
  std::vector<char> refers(s.fast.size(), 0);
  uint64_t through_bytes = 0;
  for (size_t i = 0; i < s.fast.size() && st.ok(); ++i) {
    if (ahead[i]) continue;
    // (Every file is listed: checked above.)
    auto listed = ListedFastpathFiles(s.m, s.fast[i]);
    refers[i] = listed.ok() && Refers(*listed);
    through_bytes += refers[i] ? s.fast[i].bytes : 0;
  }
  if (st.ok() && through_bytes > 0) {
    const uint64_t avail = gpu::AvailableHostMemory();
    if (avail < through_bytes + (1ull << 30)) {
      st = absl::ResourceExhaustedError(absl::StrCat(
          "this checkpoint's GPU data refers to an earlier checkpoint's: reading it back needs ",
          through_bytes, " bytes of cryod's memory, and cryod can have ", avail,
          " (the node's available memory, or its cgroup's limit)"));
    }
  }
  if (st.ok()) {
    st = FirstError(EachInParallel(s.fast.size(), [&](size_t i) -> absl::Status {
      const gpu::FastpathProcess& f = s.fast[i];
      if (f.files == 0 || ahead[i]) return absl::OkStatus();
      if (refers[i]) {
        CRYO_ASSIGN_OR_RETURN(UniqueFd through, ReadThrough(s.m, s.dir, f));
        files[i].push_back(std::move(through));
        s.fast[i].memory = true;
        expected[i].clear();
        return absl::OkStatus();
      }
      CRYO_ASSIGN_OR_RETURN(files[i], gpu::OpenFastpathFiles(s.dir, f.ns_pid, f.files, false));
      return absl::OkStatus();
    }));
  }
  // Processes that shared memory are refilled together (fastpath_cut.h).
  if (st.ok()) {
    st = gpu::RefillTogether(*d_.fastpath, s.fast, cfg_.fastpath.threads, Borrow(files), expected,
                             {}, RefillStop(s.op, s.req.deadline));
  }
  files.clear();
  // The library has copied from them, or failed: their GPU memory goes as their processes end,
  // which the job's start need not wait for.
  gpu::Parker::LetGoInBackground(std::move(s.fills));
  s.fills.clear();
  if (follow) {
    // What the read found is the restore's answer whatever the libraries said (theirs is only
    // that it was bad); read well, a refill that failed failed on its own.
    absl::Status read = s.prefetch->Wait();
    LogPrefetch(s, read, absl::Now() - waited_from);
    if (!read.ok()) st = read;
  }
  // Its slots go back, to be zeroed, once no library can be copying from them: after a failed
  // refill, when the restore has ended the processes it restored.
  if (st.ok()) s.prefetch.reset();
  if (absl::IsDataLoss(st)) {
    if (absl::Status ms = d_.store->MarkDamaged(s.m.id, std::string(st.message())); !ms.ok()) {
      CRYO_LOG(Warning) << "recording checkpoint " << s.m.id << " as damaged: " << ms;
    }
  }
  if (!st.ok()) {
    return Annotate(st,
                    "bringing GPU memory back through the fast path (restored processes "
                    "were stopped)");
  }
  return absl::OkStatus();
}

}  // namespace cryo::engine
