// The GPU fast path's steps (docs/gpu.md, "Fast path"): the library in the job moves the device
// memory it owns, at PCIe speed, before the driver's checkpoint (gpu_drain), writes it into the
// checkpoint with parallel direct I/O beside the driver's checkpoint (gpu_save), and moves it
// back after the driver's restore (gpu_refill). A job without the library, and whatever the
// library does not own, go the driver's way as before.

#include "lib/contract/gpu_fastpath.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/container/target.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/job_cut.h"
#include "daemon/engine/states.h"
#include "daemon/gpu/fastpath_client.h"
#include "daemon/gpu/fastpath_cut.h"
#include "daemon/gpu/host_copy.h"
#include "lib/base/chunked_xxh3.h"
#include "lib/base/fd.h"
#include "lib/base/fs.h"
#include "lib/base/json.h"
#include "lib/base/log.h"
#include "lib/base/parallel.h"
#include "lib/base/status.h"

namespace cryo::engine {
namespace {

// The device memory the GPU plugins saw a process use (NVML), 0 when unknown.
uint64_t UsedBytes(const std::vector<gpu::GpuProcess>& gpu, pid_t pid) {
  uint64_t used = 0;
  for (const auto& g : gpu) {
    if (g.pid != pid || !g.facts.is_object()) continue;
    auto it = g.facts.find("devices");
    if (it == g.facts.end() || !it->is_array()) continue;
    for (const auto& d : *it) {
      if (d.is_object() && d.contains("memory_used_bytes") &&
          d["memory_used_bytes"].is_number_unsigned()) {
        used += d["memory_used_bytes"].get<uint64_t>();
      }
    }
  }
  return used;
}

// What striping may add to a drain's bytes in its files (alignment of the last unit of each).
constexpr uint64_t kMaxStripeSlack = uint64_t{contract::gpu_fastpath::kMaxFiles} << 20;

// A drain's files, written (by the library with direct I/O, or by cryod), made durable with
// their metadata when the store is, before the checkpoint that names them is published.
absl::Status SyncFastpathFiles(const store::CheckpointStore& store, const std::vector<int>& fds) {
  if (!store.durable()) return absl::OkStatus();
  for (int fd : fds) {
    if (::fsync(fd) != 0) return ErrnoStatus(errno, "fsync of a fast-path file");
  }
  return absl::OkStatus();
}

// Process i's files into the manifest, with the digests they were written with.
void ListFastpathFiles(CheckpointState& s, size_t i) {
  for (size_t k = 0; k < s.live.fast[i].digests.size(); ++k) {
    s.fast_files.push_back({gpu::FastpathFileName(s.fast[i].ns_pid, static_cast<int>(k)),
                            s.live.fast[i].digests[k].size, s.live.fast[i].digests[k].checksum});
  }
}

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

CheckpointLive::~CheckpointLive() {
  for (auto& j : fast) CloseAll(j.fds);
}

bool Engine::MayDrainIntoMemory(const CheckpointState& s) const {
  if (!s.req.leave_running || s.fast.empty() || !cfg_.fastpath.in_memory) return false;
  if (cfg_.fastpath.writers <= 0) return false;
  for (const auto& f : s.fast) {
    if (f.version < contract::gpu_fastpath::kVersionMemory) return false;
  }
  return true;
}

absl::Status Engine::AllocateHostCopies(CheckpointState& s) {
  uint64_t owned = 0;
  for (const auto& f : s.fast) owned += f.bytes;
  s.live.fast.resize(s.fast.size());
  // (The step runs only where MayDrainIntoMemory holds.) The job's data and a margin for the
  // rest of the node (what it allocates meanwhile).
  if (!gpu::HostMemoryHolds(owned)) {
    CRYO_LOG(Info) << "cryod can have " << gpu::AvailableHostMemory()
                   << " bytes of memory (the node's available "
                   << "memory, or its cgroup's limit), short of the " << owned
                   << " bytes of GPU data and a margin: they go through files, and the job "
                   << "stalls until they are written (raise cryod's memory limit: the chart's "
                   << "cryod.resources)";
    return absl::OkStatus();
  }
  for (size_t i = 0; i < s.fast.size(); ++i) {
    auto m = gpu::NewHostCopy(s.fast[i].bytes, cfg_.fastpath.threads, cfg_.fastpath.host_copy_fs);
    if (!m.ok()) {
      CRYO_LOG(Warning) << "GPU data of pid " << s.fast[i].pid
                        << " goes through files: " << m.status();
      for (auto& j : s.live.fast) j.memfd = UniqueFd();
      return absl::OkStatus();
    }
    s.live.fast[i].memfd = std::move(*m);
  }
  s.op->Report(Stage::kGpuHostCopy, owned, owned,
               absl::StrCat(owned, " bytes of cryod's memory for the drain"));
  return absl::OkStatus();
}

absl::Status Engine::DrainGpus(CheckpointState& s) {
  const int writers = std::max(0, cfg_.fastpath.writers);
  s.live.fast.resize(s.fast.size());
  uint64_t owned = 0;
  // A leave-running checkpoint stalls the job only for the copies: the data goes into cryod's
  // memory (gpu_host_copy) and gpu_write writes it after the refill.
  bool memory = !s.fast.empty();
  for (size_t i = 0; i < s.fast.size(); ++i) {
    owned += s.fast[i].bytes;
    memory = memory && s.live.fast[i].memfd.get() >= 0;
  }
  // The GPU data goes into the store too (at most this much: unchanged chunks are not written).
  s.claim->HoldSpace(s.expected + owned);
  if (s.req.leave_running && !memory) {
    CRYO_LOG(Info) << "the GPU data of this leave-running checkpoint goes through files (the "
                   << "job stalls until they are written): the libraries' versions, the memory "
                   << "available or gpu_fast_path_in_memory do not allow it into cryod's memory";
  }
  for (auto& f : s.fast) {
    f.memory = memory;
    f.files = memory ? 0 : writers;
  }
  // Recorded before anything moves: a crash from here on is undone by refilling.
  s.je.fastpath = s.fast;
  CRYO_RETURN_IF_ERROR(JournalBefore(s.je));
  gpu::FastpathDrainOptions opt;
  opt.threads = copy_share_.ThreadsEach(cfg_.fastpath.threads);
  if (opt.threads < cfg_.fastpath.threads) {
    CRYO_LOG(Info) << "fast path: " << opt.threads << " copy threads per process of this job ("
                   << copy_share_.claimed() << " processes of the node drain now)";
  }
  // The bound on the job's GPU work stopping is the lock's: the drain stops it first.
  opt.quiesce_timeout = s.req.gpu_lock_timeout > absl::ZeroDuration() ? s.req.gpu_lock_timeout
                                                                      : cfg_.gpu_lock_timeout;
  // The waits on the library end with the operation: cancelled, past its deadline, or cryod
  // stopping (which cancels every operation). The undo then brings the memory back.
  Operation* op = s.op;
  const absl::Time deadline = s.req.deadline;
  opt.stop = [op, deadline] { return op->cancelled() || absl::Now() > deadline; };
  const std::string dir = s.live.staged->staging_dir();
  absl::Status st;
  std::vector<std::vector<int>> files(s.fast.size());
  for (size_t i = 0; i < s.fast.size() && memory; ++i) files[i] = {s.live.fast[i].memfd.get()};
  for (size_t i = 0; i < s.fast.size() && st.ok() && writers > 0 && !memory; ++i) {
    auto opened = gpu::OpenFastpathFiles(dir, s.fast[i].ns_pid, writers, true);
    if (opened.ok()) files[i] = s.live.fast[i].fds = *opened;
    st = opened.status();
  }
  // The processes of one job (ranks) are drained at one cut (fastpath_cut.h); a job checkpoint's
  // member's, at one cut with every other member's (job_cut.h).
  std::vector<std::unique_ptr<gpu::FastpathDrainHandle>> drains;
  std::unique_ptr<gpu::CutParties> others = JobGpuParty(s);
  if (st.ok()) st = gpu::DrainTogether(*d_.fastpath, s.fast, opt, files, &drains, others.get());
  if (!st.ok() && others) others->Fail(st);  // (also when the drain never began)
  s.live.copy_claim.Release();               // its copies are over: the next drains get its threads
  for (size_t i = 0; i < drains.size(); ++i) {
    if (drains[i] == nullptr) continue;
    gpu::FastpathProcess& f = s.fast[i];
    s.live.fast[i].drain = std::move(drains[i]);
    f.bytes = s.live.fast[i].drain->bytes();
    f.allocations = s.live.fast[i].drain->allocations();
    const auto& d = s.live.fast[i].drain->drained();
    CRYO_LOG(Info) << "fast path of pid " << f.pid << ": " << f.bytes << " bytes off the GPU in "
                   << d.total_ms << " ms (quiesce " << d.quiesce_ms << ", copy " << d.copy_ms
                   << ", release " << d.release_ms << ")"
                   << (memory ? ", into cryod's memory" : "");
    const uint64_t used = UsedBytes(s.gpu, f.pid);
    f.driver_bytes = used > f.bytes ? used - f.bytes : 0;
  }
  s.je.fastpath = s.fast;
  JournalAfter(s.je);
  if (!st.ok()) return Annotate(st, "GPU fast path");
  uint64_t moved = 0;
  for (const auto& f : s.fast) moved += f.bytes;
  s.op->Report(Stage::kGpuDrain, moved, owned,
               absl::StrCat(moved, " bytes off the GPU through the fast path"));
  return absl::OkStatus();
}

absl::Status Engine::SaveGpuData(CheckpointState& s) {
  absl::Status st = FirstError(EachInParallel(s.fast.size(), [&](size_t i) -> absl::Status {
    CRYO_ASSIGN_OR_RETURN(s.live.fast[i].digests, s.live.fast[i].drain->WaitSaved());
    // Into cryod's memory: "saved" says the job holds no copy (CRIU dumps next); gpu_write
    // writes the files after the refill.
    if (s.fast[i].memory) return absl::OkStatus();
    if (s.live.fast[i].digests.size() != s.live.fast[i].fds.size()) {
      return absl::InternalError(absl::StrCat("the fast path of pid ", s.fast[i].pid, " wrote ",
                                              s.live.fast[i].digests.size(), " files, not ",
                                              s.live.fast[i].fds.size()));
    }
    // What the job says it wrote is checked against what the files hold: a job (or whoever
    // answers for it) cannot have a size published that the files do not have.
    uint64_t total = 0;
    for (size_t k = 0; k < s.live.fast[i].digests.size(); ++k) {
      struct stat st;
      if (::fstat(s.live.fast[i].fds[k], &st) != 0) return ErrnoStatus(errno, "fstat");
      const uint64_t claimed = s.live.fast[i].digests[k].size;
      if (static_cast<uint64_t>(st.st_size) != claimed) {
        return absl::DataLossError(absl::StrCat("the fast path of pid ", s.fast[i].pid,
                                                " says its file ", k, " holds ", claimed,
                                                " bytes; it holds ", st.st_size));
      }
      total += claimed;
    }
    if (total < s.fast[i].bytes || total - s.fast[i].bytes > kMaxStripeSlack) {
      return absl::DataLossError(absl::StrCat("the fast path of pid ", s.fast[i].pid, " drained ",
                                              s.fast[i].bytes, " bytes but its files hold ",
                                              total));
    }
    CRYO_RETURN_IF_ERROR(SyncFastpathFiles(*d_.store, s.live.fast[i].fds));
    CloseAll(s.live.fast[i].fds);
    return absl::OkStatus();
  }));
  if (!st.ok()) return Annotate(st, "GPU fast path");
  for (size_t i = 0; i < s.fast.size(); ++i) ListFastpathFiles(s, i);
  return absl::OkStatus();
}

std::function<bool()> Engine::RefillStop(Operation* op, absl::Time deadline) const {
  return [this, op, deadline] {
    return (op != nullptr && op->cancelled()) || absl::Now() > deadline || PastStopGrace();
  };
}

absl::Status Engine::RefillGpus(CheckpointState& s) {
  const std::string dir = s.live.staged->staging_dir();
  std::vector<std::vector<int>> files(s.fast.size());
  std::vector<std::vector<FileDigest>> expected(s.fast.size());
  absl::Status st;
  for (size_t i = 0; i < s.fast.size() && st.ok(); ++i) {
    if (s.fast[i].memory) {
      // From cryod's memory, at host memory speed (the library is given its own descriptor).
      const int m = ::dup(s.live.fast[i].memfd.get());
      if (m < 0) st = ErrnoStatus(errno, "dup of cryod's host memory");
      if (m >= 0) files[i] = {m};
      continue;
    }
    if (i < s.live.fast.size()) expected[i] = s.live.fast[i].digests;
    if (s.fast[i].files == 0) continue;
    auto opened = gpu::OpenFastpathFiles(dir, s.fast[i].ns_pid, s.fast[i].files, false);
    if (opened.ok()) files[i] = *opened;
    st = opened.status();
  }
  // Processes that share memory are refilled together (fastpath_cut.h).
  if (st.ok()) {
    st = gpu::RefillTogether(*d_.fastpath, s.fast, cfg_.fastpath.threads, files, expected, {},
                             RefillStop(s.op, s.req.deadline));
  }
  for (auto& f : files) CloseAll(f);
  return Annotate(st, "GPU fast path");
}

absl::Status Engine::WriteGpuData(CheckpointState& s) {
  const std::string dir = s.live.staged->staging_dir();
  const int writers = std::max(1, cfg_.fastpath.writers);
  Operation* op = s.op;
  std::atomic<uint64_t> done{0};
  uint64_t total = 0;
  for (const auto& f : s.fast) total += f.memory ? f.bytes : 0;
  // Chunks unchanged since the workload's newest good checkpoint are not written again: the
  // manifest refers to the checkpoint that holds them (docs/gpu.md, "Incremental GPU data").
  std::optional<store::Manifest> prev;
  if (cfg_.fastpath.incremental) prev = NewestGood(s.workload);
  std::map<std::string, const store::ManifestFile*> prev_files;
  if (prev) {
    for (const auto& mf : prev->files) {
      if (!mf.chunks.empty()) prev_files[mf.path] = &mf;
    }
    // Kept from deletion (by retention or `cryo rm`) until this checkpoint is published or gone.
    s.claim->HoldReferences({prev->id});
  }
  std::vector<std::vector<gpu::WrittenFile>> written(s.fast.size());
  absl::Status st = FirstError(EachInParallel(s.fast.size(), [&](size_t i) -> absl::Status {
    const gpu::FastpathProcess& f = s.fast[i];
    if (!f.memory) return absl::OkStatus();
    std::vector<gpu::ChunkDigests> previous(writers);
    for (int k = 0; k < writers; ++k) {
      auto it = prev_files.find(gpu::FastpathFileName(f.ns_pid, k));
      if (it != prev_files.end()) previous[k] = {it->second->size, it->second->chunks};
    }
    CRYO_ASSIGN_OR_RETURN(std::vector<int> fds,
                          gpu::OpenFastpathFiles(dir, f.ns_pid, writers, true));
    auto out = gpu::WriteHostCopy(s.live.fast[i].memfd.get(), f.bytes, gpu::kFastpathStripeBytes,
                                  fds, previous, [op] { return op->cancelled(); });
    absl::Status w = out.ok() ? SyncFastpathFiles(*d_.store, fds) : out.status();
    CloseAll(fds);
    CRYO_RETURN_IF_ERROR(w);
    written[i] = std::move(*out);
    s.live.fast[i].digests.clear();
    for (const auto& wf : written[i]) s.live.fast[i].digests.push_back(wf.digest);
    op->Report(Stage::kGpuWrite, done += f.bytes, total,
               absl::StrCat("GPU data of pid ", f.pid, " written while the job runs on"));
    return absl::OkStatus();
  }));
  if (!st.ok()) return Annotate(st, "writing the GPU data from cryod's memory");
  uint64_t referenced = 0;
  for (size_t i = 0; i < s.fast.size(); ++i) {
    gpu::FastpathProcess& f = s.fast[i];
    if (!f.memory) continue;
    f.memory = false;
    f.files = writers;
    s.live.fast[i].memfd = UniqueFd();  // the memory goes back to the node
    const size_t first = s.fast_files.size();
    ListFastpathFiles(s, i);
    for (size_t k = 0; k < written[i].size(); ++k) {
      store::ManifestFile& mf = s.fast_files[first + k];
      mf.chunks = written[i][k].chunks.chunks;
      const store::ManifestFile* pf = prev_files.count(mf.path) ? prev_files[mf.path] : nullptr;
      for (uint32_t j : written[i][k].skipped) {
        // Where the previous checkpoint refers on, so does this one: to the holder.
        std::string holder = prev->id;
        for (const auto& [id, list] : pf->refs) {
          if (std::find(list.begin(), list.end(), j) != list.end()) holder = id;
        }
        mf.refs[holder].push_back(j);
      }
      referenced += mf.ReferencedBytes();
    }
  }
  if (referenced > 0) {
    CRYO_LOG(Info) << "GPU data: " << referenced << " of " << total << " bytes unchanged since "
                   << "checkpoint " << prev->id << ", referred to instead of written";
  }
  s.je.fastpath = s.fast;
  JournalAfter(s.je);
  return absl::OkStatus();
}

void Engine::UndoDrain(const journal::Entry& e, CheckpointLive* live) {
  std::vector<int> memfds;
  if (live) {
    // A drain still writing its files is finished first: the library then is in a state a
    // refill knows (its memory in its own memory, or in the files).
    for (auto& j : live->fast) {
      if (j.drain != nullptr) {
        // Its failure is the refill's to meet: the files it reads are checked by their digests.
        (void)j.drain->WaitSaved(/*stoppable=*/false, [this] { return PastStopGrace(); });
      }
      j.drain.reset();
      CloseAll(j.fds);
      j.fds.clear();
      memfds.push_back(j.memfd.get());
    }
  }
  RefillFastpath(e.fastpath, e.staging_dir, memfds);
}

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
  std::vector<std::vector<int>> files;
  for (size_t i = 0; i < procs.size(); ++i) {
    if (!state[i]) continue;
    if (*state[i] == State::kRunning) {
      running.push_back(procs[i]);
      continue;
    }
    std::vector<int> fds;
    if (*state[i] == State::kSaved && procs[i].memory) {
      const int m = i < memfds.size() && memfds[i] >= 0 ? ::dup(memfds[i]) : -1;
      if (m < 0) {
        // Only cryod's memory held it, and that cryod is gone: the job cannot go on. Ended, it
        // is restarted from its newest good checkpoint instead of hanging with its gate shut.
        CRYO_LOG(Error) << "fast path of pid " << procs[i].pid << ": its GPU memory was only in "
                        << "the memory of a cryod that stopped; it is lost, and the process is "
                        << "ended so that its job resumes from its newest good checkpoint";
        ::kill(procs[i].pid, SIGKILL);
        continue;
      }
      fds = {m};
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
        files.push_back({through->release()});
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
      fds = *opened;
    }
    todo.push_back(procs[i]);
    files.push_back(std::move(fds));
  }
  if (todo.empty()) return;
  // An undo's wait ends only when cryod stops for good (its grace passed): until then the job's
  // memory is what it waits for.
  absl::Status r = gpu::RefillTogether(*d_.fastpath, todo, cfg_.fastpath.threads, files, {},
                                       running, [this] { return PastStopGrace(); });
  for (auto& f : files) CloseAll(f);
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

absl::StatusOr<UniqueFd> Engine::ReadThrough(const store::Manifest& m, const std::string& dir,
                                             const gpu::FastpathProcess& f) {
  CRYO_ASSIGN_OR_RETURN(std::vector<const store::ManifestFile*> listed, ListedFastpathFiles(m, f));
  if (!Refers(listed)) return UniqueFd();
  // Each chunk from the file that holds it: this checkpoint's, or the same file of the one it
  // refers to (at the same offset), each checked against the digest this manifest recorded.
  std::vector<UniqueFd> open;
  auto open_file = [&](const std::string& d, const std::string& name) -> absl::StatusOr<int> {
    UniqueFd fd(::open(fs::Join(d, name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) return ErrnoStatus(errno, fs::Join(d, name));
    open.push_back(std::move(fd));
    return open.back().get();
  };
  std::vector<gpu::ChunkSources> src(listed.size());
  for (size_t k = 0; k < listed.size(); ++k) {
    const store::ManifestFile& mf = *listed[k];
    if (mf.chunks.empty()) {
      return absl::DataLossError(absl::StrCat(mf.path, " has no chunk digests to read it by"));
    }
    CRYO_ASSIGN_OR_RETURN(int own, open_file(dir, mf.path));
    src[k].fds.assign(mf.chunks.size(), own);
    src[k].chunks = mf.chunks;
    src[k].expected = {mf.size, mf.checksum};
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
  std::vector<std::vector<int>> files(s.fast.size());
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
  // Incremental: a process whose files refer to an earlier checkpoint's is read through into
  // cryod's memory, checked there, and refilled from it; all of them at once, within the memory
  // the node has for them. The others' files the library reads itself.
  std::vector<char> refers(s.fast.size(), 0);
  uint64_t through_bytes = 0;
  for (size_t i = 0; i < s.fast.size() && st.ok(); ++i) {
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
      if (f.files == 0) return absl::OkStatus();
      if (refers[i]) {
        CRYO_ASSIGN_OR_RETURN(UniqueFd through, ReadThrough(s.m, s.dir, f));
        files[i] = {through.release()};
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
    st = gpu::RefillTogether(*d_.fastpath, s.fast, cfg_.fastpath.threads, files, expected, {},
                             RefillStop(s.op, s.req.deadline));
  }
  for (auto& f : files) CloseAll(f);
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
