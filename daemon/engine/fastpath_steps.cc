// The GPU fast path's steps of a checkpoint (docs/gpu.md, "Fast path"): the library in the job
// moves the device memory it owns, at PCIe speed, before the driver's checkpoint (gpu_drain),
// writes it into the checkpoint beside the driver's checkpoint (gpu_save), and takes it back
// after the driver's restore (gpu_refill); a drain into cryod's memory is written while the job
// runs on (gpu_write). The processes and what the checkpoint holds of them are the session's
// (daemon/fastpath/session.h); each step here is the engine's side of one of its operations:
// the node's settings, the journal, progress, and the other parties of a job's cut.

#include <algorithm>
#include <atomic>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/states.h"
#include "daemon/fastpath/session.h"
#include "daemon/gpu/fastpath_cut.h"
#include "daemon/gpu/host_copy.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/contract/gpu_fastpath_messages.h"

namespace cryo::engine {

bool Engine::MayDrainIntoMemory(const CheckpointState& s) const {
  if (s.live.fast.empty() || !cfg_.fastpath.in_memory || cfg_.fastpath.writers <= 0) return false;
  // A stop checkpoint, only into staging memory held ready: fresh memory fills no faster than
  // the job's own, and the library writes its files itself sooner.
  if (!s.req.leave_running &&
      (cfg_.fastpath.staging == nullptr || cfg_.fastpath.staging->counts().ready == 0)) {
    return false;
  }
  const auto& procs = s.live.fast.records();
  return std::all_of(procs.begin(), procs.end(), [](const gpu::FastpathProcess& f) {
    return f.version >= contract::gpu_fastpath::kVersionMemory;
  });
}

absl::Status Engine::AllocateHostCopies(CheckpointState& s) {
  const uint64_t owned = s.live.fast.bytes();
  const bool stop = !s.req.leave_running;
  // What the staging memory has no ready slot for gets fresh memory: the job's data and a
  // margin for the rest of the node (what it allocates meanwhile).
  auto fresh = [stop](uint64_t bytes) -> absl::Status {
    if (stop) {
      return absl::UnavailableError(
          "the staging memory (gpu_staging_mib) has no ready slot for every process of the job, "
          "so this stop checkpoint's GPU data goes through files");
    }
    if (gpu::HostMemoryHolds(bytes)) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        "cryod can have ", gpu::AvailableHostMemory(), " bytes of memory (the node's available ",
        "memory, or its cgroup's limit), short of the ", bytes, " bytes of GPU data and a ",
        "margin: they go through files, and the job stalls until they are written (raise ",
        "cryod's memory limit: the chart's cryod.resources)"));
  };
  auto pooled = s.live.fast.AllocateHostCopies(cfg_.fastpath.threads, cfg_.fastpath.host_copy_fs,
                                               cfg_.fastpath.staging, fresh);
  if (!pooled.ok()) {
    if (absl::IsUnavailable(pooled.status()) || absl::IsResourceExhausted(pooled.status())) {
      CRYO_LOG(Info) << pooled.status().message();
    } else {
      CRYO_LOG(Warning) << "GPU data goes through files: " << pooled.status();
    }
    return absl::OkStatus();
  }
  s.op->Report(Stage::kGpuHostCopy, owned, owned,
               absl::StrCat(owned, " bytes of cryod's memory for the drain (", *pooled, " of ",
                            s.live.fast.size(), " processes into staging memory held ready)"));
  // gpu_park: a leave-running drain stays on the GPU where it has room (gpu_fastpath.h,
  // "Parking"). The parking processes start here, while the job runs: each initializes the
  // driver (0.2-0.4 s on an H200).
  if (!stop && cfg_.fastpath.park && !cfg_.fastpath.parker.binary.empty()) {
    const size_t parked = s.live.fast.StartParkers(cfg_.fastpath.parker);
    CRYO_LOG(Info) << "checkpoint " << s.id << ": " << parked << " of " << s.live.fast.size()
                   << " processes have a park on their GPU";
  }
  return absl::OkStatus();
}

gpu::FastpathDrainOptions Engine::DrainOptionsFor(const CheckpointState& s) const {
  gpu::FastpathDrainOptions opt;
  opt.threads = copy_share_.ThreadsEach(cfg_.fastpath.threads);
  if (opt.threads < cfg_.fastpath.threads) {
    CRYO_LOG(Info) << "fast path: " << opt.threads << " copy threads per process of this job ("
                   << copy_share_.claimed() << " processes of the node drain now)";
  }
  // The bound on the job's GPU work stopping is the lock's: the drain stops it first.
  opt.quiesce_timeout = GpuLockTimeout(s.req);
  // The waits on the library end with the operation: cancelled, past its deadline, or cryod
  // stopping (which cancels every operation). The undo then brings the memory back.
  Operation* op = s.op;
  const absl::Time deadline = s.req.deadline;
  opt.stop = [op, deadline] { return op->cancelled() || absl::Now() > deadline; };
  return opt;
}

absl::Status Engine::DrainGpus(CheckpointState& s) {
  gpu::FastpathSession& fast = s.live.fast;
  const uint64_t owned = fast.bytes();
  // A leave-running checkpoint stalls the job only for the copies: the data goes into cryod's
  // memory (gpu_host_copy) and gpu_write writes it after the refill.
  const bool memory = fast.has_host_copies();
  // The GPU data goes into the store too (at most this much: unchanged chunks are not written).
  s.claim->HoldSpace(s.procs.expected() + owned);
  if (s.req.leave_running && !memory) {
    CRYO_LOG(Info) << "the GPU data of this leave-running checkpoint goes through files (the "
                   << "job stalls until they are written): the libraries' versions, the memory "
                   << "available or gpu_fast_path_in_memory do not allow it into cryod's memory";
  }
  fast.PlaceData(memory, std::max(0, cfg_.fastpath.writers));
  // Recorded before anything moves: a crash from here on is undone by refilling.
  CRYO_RETURN_IF_ERROR(JournalBefore(s.JournalEntry()));
  const gpu::FastpathDrainOptions opt = DrainOptionsFor(s);
  absl::Status st = fast.OpenDrainFiles(s.live.staged->staging_dir());
  // The processes of one job (ranks) are drained at one cut (fastpath_cut.h); a job checkpoint's
  // member's, at one cut with every other member's (job_cut.h).
  std::vector<std::unique_ptr<gpu::FastpathDrainHandle>> drains;
  std::unique_ptr<gpu::CutParties> others = JobGpuParty(s);
  // With gpu_write_start "draining", a stop checkpoint's files are written behind the drain into
  // staging memory, each chunk once the library says it is there (gpu_fastpath.h, "Following"),
  // where every library follows; else once the drain is done ("drained") or once the driver's
  // checkpoint is (SaveGpuData). Not by default: the drain and the write share the node's memory
  // bandwidth, and beside the write the drain took 2.0 s instead of 0.85 (one H200 host,
  // 2026-11-30).
  const bool stop_into_memory = memory && !s.req.leave_running;
  if (st.ok() && stop_into_memory && cfg_.fastpath.write_start == GpuWriteStart::kDraining &&
      fast.FollowDrains()) {
    CRYO_LOG(Info) << "checkpoint " << s.id << ": its GPU data is written behind the drain";
    BeginGpuWrite(s);
  }
  if (st.ok()) {
    st = gpu::DrainTogether(*d_.fastpath, fast.mutable_records(), opt, fast.DrainTargets(), &drains,
                            others.get());
  }
  if (!st.ok() && others) others->Fail(st);  // (also when the drain never began)
  s.live.copy_claim.Release();               // its copies are over: the next drains get its threads
  fast.TakeDrains(std::move(drains), s.live.driver.records());
  JournalAfter(s.JournalEntry());
  if (!st.ok()) return Annotate(st, "GPU fast path");
  s.op->Report(Stage::kGpuDrain, fast.bytes(), owned,
               absl::StrCat(fast.bytes(), " bytes off the GPU through the fast path"));
  // "drained": the slot holds all of it now; the write goes beside the driver's lock and
  // checkpoint, which move little memory, at nice 10 below them.
  if (stop_into_memory && cfg_.fastpath.write_start == GpuWriteStart::kDrained) {
    CRYO_LOG(Info) << "checkpoint " << s.id << ": its GPU data is written from the drain's end";
    BeginGpuWrite(s);
  }
  return absl::OkStatus();
}

absl::Status Engine::SaveGpuData(CheckpointState& s) {
  CRYO_RETURN_IF_ERROR(Annotate(s.live.fast.WaitSaved(d_.store->durable()), "GPU fast path"));
  // A stop checkpoint's data in cryod's memory, unless its write follows the drain already, is
  // written from now on, beside CRIU's dump; gpu_write waits for it.
  if (s.live.fast.in_memory() && !s.req.leave_running && !s.live.fast.writing()) {
    BeginGpuWrite(s);
  }
  return absl::OkStatus();
}

std::function<bool()> Engine::RefillStop(Operation* op, absl::Time deadline) const {
  return [this, op, deadline] {
    return (op != nullptr && op->cancelled()) || absl::Now() > deadline || PastStopGrace();
  };
}

absl::Status Engine::RefillGpus(CheckpointState& s) {
  auto src = s.live.fast.RefillSources(s.live.staged->staging_dir());
  // Processes that share memory are refilled together (fastpath_cut.h).
  absl::Status st = src.status();
  if (st.ok()) {
    st = gpu::RefillTogether(*d_.fastpath, s.live.fast.records(), cfg_.fastpath.threads,
                             Borrow(src->files), src->expected, {},
                             RefillStop(s.op, s.req.deadline));
  }
  return Annotate(st, "GPU fast path");
}

std::optional<store::Manifest> Engine::WritePrevious(CheckpointState& s) {
  // Chunks unchanged since the workload's newest good checkpoint are not written again: the
  // manifest refers to the checkpoint that holds them (docs/gpu.md, "Incremental GPU data").
  std::optional<store::Manifest> prev;
  if (cfg_.fastpath.incremental) prev = NewestGood(s.workload);
  // Kept from deletion (by retention or `cryo rm`) until this checkpoint is published or gone.
  if (prev) s.claim->HoldReferences({prev->id});
  return prev;
}

void Engine::BeginGpuWrite(CheckpointState& s) {
  const std::optional<store::Manifest> prev = WritePrevious(s);
  Operation* op = s.op;
  s.live.fast.BeginWrite(s.live.staged->staging_dir(), std::max(1, cfg_.fastpath.writers),
                         prev ? &*prev : nullptr, d_.store->durable(),
                         [op] { return op->cancelled(); });
}

absl::Status Engine::WriteGpuData(CheckpointState& s) {
  Operation* op = s.op;
  const uint64_t total = s.live.fast.bytes();
  std::atomic<uint64_t> done{0};
  // A stop checkpoint's write began after its drain (BeginGpuWrite); this waits for it.
  std::optional<store::Manifest> prev;
  if (!s.live.fast.writing()) prev = WritePrevious(s);
  // Parked data comes into cryod's memory now, the job running; the write follows it.
  CRYO_RETURN_IF_ERROR(Annotate(s.live.fast.BeginParkCopies(), "GPU fast path"));
  auto referenced = s.live.fast.WriteHostCopies(
      s.live.staged->staging_dir(), std::max(1, cfg_.fastpath.writers), prev ? &*prev : nullptr,
      d_.store->durable(), [op] { return op->cancelled(); },
      [op, &done, total](pid_t pid, uint64_t bytes) {
        op->Report(Stage::kGpuWrite, done += bytes, total,
                   absl::StrCat("GPU data of pid ", pid, " written from cryod's memory"));
      });
  if (!referenced.ok()) {
    return Annotate(referenced.status(), "writing the GPU data from cryod's memory");
  }
  if (*referenced > 0) {
    CRYO_LOG(Info) << "GPU data: " << *referenced << " of " << total << " bytes unchanged since "
                   << "an earlier checkpoint, referred to instead of written";
  }
  JournalAfter(s.JournalEntry());
  return absl::OkStatus();
}

void Engine::UndoDrain(const journal::Entry& e, CheckpointLive* live) {
  std::vector<int> host_copies;
  if (live) host_copies = live->fast.Settle([this] { return PastStopGrace(); });
  RefillFastpath(e.fastpath, e.staging_dir, host_copies);
}

}  // namespace cryo::engine
