// The checkpoint transaction (see engine.h for the steps and transaction.h for the rules).

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "daemon/container/container_checkpoint.h"
#include "daemon/criu/action_gate.h"
#include "daemon/criu/anon_pages.h"
#include "daemon/criu/network_lock.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/job_cut.h"
#include "daemon/engine/states.h"
#include "daemon/engine/step_hooks.h"
#include "daemon/gpu/host_copy.h"
#include "daemon/store/checksum.h"
#include "daemon/store/signature.h"
#include "lib/base/fs.h"
#include "lib/base/log.h"
#include "lib/base/proc.h"
#include "lib/base/status.h"

namespace cryo::engine {

Transaction<CheckpointState> Engine::CheckpointSteps() {
  using S = CheckpointState;
  auto run = [this](absl::Status (Engine::*f)(S&)) {
    return [this, f](S& s) { return (this->*f)(s); };
  };
  auto undo = [this](void (Engine::*f)(const journal::Entry&, CheckpointLive*)) {
    return [this, f](const journal::Entry& e, CheckpointLive* live) { (this->*f)(e, live); };
  };
  auto has_gpu = [](const S& s) { return !s.live.driver.empty(); };
  auto fast_bytes = [](const S& s) { return s.live.fast.bytes(); };
  auto expected = [](const S& s) { return StageSize{s.procs.expected(), ""}; };
  auto step = [](auto&&... a) { return MakeStep<S>(std::forward<decltype(a)>(a)...); };
  return Transaction<S>({
      step("validate", Stage::kValidate, run(&Engine::ValidateCheckpoint), nullptr, nullptr,
           expected),
      // A stop's checkpoint that would not finish in time is not taken when an earlier one
      // can stand in (plan.cc)...
      step("plan", Stage::kUnspecified, run(&Engine::PlanCheckpoint), nullptr,
           [](const S& s) { return s.req.plan && s.req.deadline != absl::InfiniteFuture(); }),
      // ...then the job ends as after a checkpoint, its replacement told to resume from that
      // one, and the transaction ends there.
      [&] {
        auto f = step("fall_back", Stage::kUnspecified, run(&Engine::FallBack), nullptr,
                      [](const S& s) { return s.fallback.has_value(); });
        f.ends = [](const S& s) { return true; };
        return f;
      }(),
      step("stage", Stage::kUnspecified, run(&Engine::StageCheckpoint), undo(&Engine::UndoStage)),
      // A leave-running checkpoint's drain goes into cryod's memory, allocated first while the
      // job runs on (the job then stalls only for the copies); a stop checkpoint's, when the
      // staging memory has it ready (the GPUs then vacate at memory speed).
      step(
          "gpu_host_copy", Stage::kGpuHostCopy, run(&Engine::AllocateHostCopies), nullptr,
          [this](const S& s) { return MayDrainIntoMemory(s); },
          [fast_bytes](const S& s) {
            return StageSize{fast_bytes(s), "cryod's memory for the drain"};
          }),
      // The fast path moves what its library owns before the driver's lock, which would block
      // the library's own copies too; its undo brings the memory back (after gpu_lock's undo
      // gave the driver's state back: undos run newest first).
      // A leave-running checkpoint of processes under the fast-path library: their private
      // memory copied while the job runs on, its writes tracked, so that the freeze copies only
      // what it wrote since (criu/pre_copy.h).
      step("pre_copy", Stage::kUnspecified, run(&Engine::PreCopyMemory), undo(&Engine::UndoPreCopy),
           [this](const S& s) {
             return s.req.leave_running && !s.req.job_cut && cfg_.dump_pre_copy &&
                    !s.live.fast.empty() && CopiesDumpPages(s);
           }),
      step(
          "gpu_drain", Stage::kGpuDrain, run(&Engine::DrainGpus), undo(&Engine::UndoDrain),
          [](const S& s) { return !s.live.fast.empty(); },
          [fast_bytes](const S& s) {
            return StageSize{fast_bytes(s),
                             absl::StrCat(s.live.fast.size(), " fast-path processes")};
          }),
      // Their shared memory (pinned host memory the GPU writes by DMA) copied once the drain has
      // stopped the GPU work, in the background as the driver checkpoints; the dump waits for it.
      step("pre_copy_shared", Stage::kUnspecified, run(&Engine::PreCopySharedMemory), nullptr,
           [this](const S& s) { return s.live.pre_copy != nullptr && cfg_.dump_pre_copy_shared; }),
      // gpu_lock's undo takes the GPU state back from wherever it got (locked or checkpointed).
      step("gpu_lock", Stage::kGpuLock, run(&Engine::LockGpus), undo(&Engine::UndoGpu), has_gpu,
           [](const S& s) {
             return StageSize{0, absl::StrCat(s.live.driver.size(), " GPU processes")};
           }),
      step("gpu_checkpoint", Stage::kGpuCheckpoint, run(&Engine::CheckpointGpus), nullptr, has_gpu),
      // The fast path's files are written beside the driver's checkpoint; done before CRIU
      // dumps the job, whose memory must hold no copy of them then.
      step(
          "gpu_save", Stage::kGpuSave, run(&Engine::SaveGpuData), nullptr,
          [this](const S& s) { return !s.live.fast.empty() && cfg_.fastpath.writers > 0; },
          [fast_bytes](const S& s) {
            return StageSize{fast_bytes(s), ""};
          }),
      step("dump", Stage::kDump, run(&Engine::Dump), undo(&Engine::UndoDump), nullptr, expected),
      // A checkpoint that a restore onto a like target would refuse is refused now, while the
      // dump's undo can still let the job run on: never stop a job into one that cannot return.
      step("credentials", Stage::kUnspecified, run(&Engine::CheckDumpRestorable)),
      step("rootfs", Stage::kRootfs, run(&Engine::SaveRootfs), nullptr,
           [](const S& s) { return s.ctr.has_value(); }),
      // A job checkpoint's part: every member is dumped before any runs on or is published
      // (job_cut.h); one that fails or gives up fails them all, and each is rolled back.
      step("job_cut", Stage::kUnspecified, run(&Engine::MeetJobCut), nullptr,
           [](const S& s) { return s.req.job_cut != nullptr; }),
      // A container (or a job's member) asked to run on goes on as soon as its files are saved
      // too (and the cut is reached).
      step("resume_early", Stage::kUnspecified, run(&Engine::ResumeEarly), nullptr,
           [](const S& s) { return s.procs.left_stopped() && s.req.leave_running; }),
      step("gpu_resume", Stage::kGpuRestore, run(&Engine::ResumeGpus), nullptr,
           [](const S& s) { return s.req.leave_running && !s.live.driver.empty(); }),
      // A leave-running checkpoint: the job goes on with its memory back on the GPU.
      step(
          "gpu_refill", Stage::kGpuRefill, run(&Engine::RefillGpus), nullptr,
          [](const S& s) { return s.req.leave_running && !s.live.fast.empty(); },
          [fast_bytes](const S& s) {
            return StageSize{fast_bytes(s), ""};
          }),
      // The pages copied ahead go into the images as the job runs on: timed as the images'
      // write (dump_write), not in gpu_refill, whose stage would otherwise hold it.
      step(
          "dump_pages", Stage::kDumpWrite, run(&Engine::FinishDumpPages), nullptr,
          [](const S& s) { return s.live.dump_pages != nullptr; },
          [](const S&) {
            return StageSize{0, "pages copied ahead put into the images while the job runs on"};
          }),
      // ... and, when it drained into cryod's memory, its files are written as it runs on.
      step(
          "gpu_write", Stage::kGpuWrite, run(&Engine::WriteGpuData), nullptr,
          [](const S& s) { return s.live.fast.in_memory(); },
          [fast_bytes](const S& s) {
            return StageSize{fast_bytes(s), "written while the job runs on"};
          }),
      // ... and CRIU's images, when it dumped into node memory.
      step(
          "dump_write", Stage::kDumpWrite, run(&Engine::WriteDump), nullptr,
          [](const S& s) { return s.live.dump_staging.active(); },
          [](const S& s) {
            return StageSize{s.procs.DumpBytes(), "written while the job runs on"};
          }),
      step("manifest", Stage::kChecksum, run(&Engine::BuildManifest), nullptr, nullptr, expected),
      // Publish begins its stage itself: the manifest records the stages before it.
      step("publish", Stage::kUnspecified, run(&Engine::Publish), nullptr, nullptr, nullptr,
           /*commit=*/true),
      step("finish", Stage::kFinish, run(&Engine::Finish), nullptr, nullptr, expected),
      step(
          "export", Stage::kExport, run(&Engine::Export), nullptr,
          [](const S& s) { return s.ctr.has_value() && !s.req.export_archive.empty(); },
          [](const S& s) {
            return StageSize{s.manifest.TotalBytes(), ""};
          }),
  });
}

absl::StatusOr<CheckpointResult> Engine::Checkpoint(const CheckpointRequest& req, Operation& op) {
  StageClock clock("checkpoint", d_.metrics, op);
  // CRIU's logs of old operations go as new ones come, not only when cryod starts.
  auto prune = absl::MakeCleanup([this] { PruneOpLogs(); });
  CheckpointState s;
  s.req = req;
  s.op = &op;
  s.clock = &clock;
  s.t_start = absl::Now();
  bool journaled = false;

  // Once the dump has started, the deadline is checked again right before the publish: a dump
  // cannot be interrupted, and stopping between its parts would only lose the work.
  auto deadline = [&](const Step<CheckpointState>& step) -> absl::Status {
    const bool check = step.name == "validate" || step.name == "publish";
    if (!check || absl::Now() <= req.deadline) return absl::OkStatus();
    return step.name == "validate"
               ? absl::DeadlineExceededError(
                     "the caller's deadline passed before the checkpoint started; nothing was "
                     "done")
               : absl::DeadlineExceededError(absl::StrCat(
                     "checkpoint ", s.id, " was not finished by the caller's deadline (",
                     absl::FormatDuration(
                         absl::Trunc(absl::Now() - s.t_start, absl::Milliseconds(1))),
                     " after it started); not published, the job was resumed"));
  };
  auto hooks = StepHooks<CheckpointState>(cfg_.fault, op, clock, "checkpoint", deadline,
                                          "; not published, the job was resumed");
  hooks.on_begin = [&](const std::string& name) -> absl::Status {
    s.steps.push_back(name);
    // The first step with an undo (stage) creates the entry; it must exist before anything
    // irreversible happens.
    if (name == "stage") return absl::OkStatus();  // written by the step itself
    journaled = true;
    return JournalBefore(s.JournalEntry());
  };
  hooks.on_rolled_back = [&] {
    if (s.live.staged != nullptr || journaled) {
      if (absl::Status st = d_.journal->Remove(op.id()); !st.ok()) {
        CRYO_LOG(Error) << "journal: " << st;
      }
    }
  };
  absl::Status st = checkpoint_txn_->Run(s, hooks);
  if (s.progress == journal::OpState::kPublished) {
    // Committed: the journal entry has done its job, whatever the completion steps said.
    if (absl::Status r = d_.journal->Remove(op.id()); !r.ok()) CRYO_LOG(Error) << "journal: " << r;
  }
  // After the commit, a failed completion step says itself that the checkpoint is published.
  if (!st.ok()) return st;
  clock.End();
  if (s.fallback) {
    CheckpointResult r;
    r.manifest = std::move(s.fallback->newest);
    r.not_taken = std::move(s.fallback->why);
    r.work_lost = s.fallback->lost;
    return r;
  }
  if (d_.metrics) {
    d_.metrics->ObserveOperation("checkpoint", absl::ToDoubleSeconds(absl::Now() - s.t_start));
  }
  s.manifest.stage_ms = clock.ms();
  CRYO_LOG(Info) << "checkpoint " << s.id << " of "
                 << (s.ctr ? absl::StrCat("container ", s.ctr->info.id.substr(0, 13))
                           : absl::StrCat("pid ", s.procs.target()))
                 << " published (" << s.manifest.TotalBytes() << " bytes, "
                 << s.manifest.files.size() << " files)";
  CheckpointResult r;
  r.manifest = std::move(s.manifest);
  r.store_path = s.published_path;
  r.published_at = s.published_at;
  return r;
}

absl::Status Engine::StageCheckpoint(CheckpointState& s) {
  CRYO_RETURN_IF_ERROR(d_.store->CheckWritable());
  CRYO_ASSIGN_OR_RETURN(s.live.staged, d_.store->Stage(s.id));
  s.op_dir = OpDir(s.op->id());
  CRYO_RETURN_IF_ERROR(fs::MakeDirs(s.op_dir, 0700));
  // The journal's first record: from here on a crash is undone at the next start.
  return JournalBefore(s.JournalEntry());
}

// Best effort: a staging directory that could not go is collected later (CollectIncomplete), and
// is never listed as a checkpoint.
void Engine::UndoStage(const journal::Entry& e, CheckpointLive* live) {
  if (live && live->staged) {
    (void)live->staged->Abort();
  } else if (!e.staging_dir.empty()) {
    (void)d_.store->RemoveStagingDir(e.staging_dir);
  }
}

absl::Duration Engine::GpuLockTimeout(const CheckpointRequest& req) const {
  return req.gpu_lock_timeout > absl::ZeroDuration() ? req.gpu_lock_timeout : cfg_.gpu_lock_timeout;
}

absl::Status Engine::LockGpus(CheckpointState& s) {
  return s.live.driver.Lock(*d_.gpu, GpuLockTimeout(s.req));
}

absl::Status Engine::CheckpointGpus(CheckpointState& s) {
  CRYO_RETURN_IF_ERROR(s.live.driver.Checkpoint(*d_.gpu));
  // Device memory now sits in the processes: CRIU will write it, so count it.
  s.procs.Remeasure(*d_.proc);
  s.claim->HoldSpace(s.procs.expected());
  return absl::OkStatus();
}

void Engine::UndoGpu(const journal::Entry& e, CheckpointLive* live) {
  gpu::DriverSession::Undo(*d_.gpu, e.gpu, live ? &live->driver : nullptr);
}

// cryod's copy of a dump's anonymous memory (criu/anon_pages.h): CRIU leaves it out,
// its post-dump gate holds the frozen tasks, and a thread here copies the pages with several
// threads and lets CRIU go on. With a copy ahead (pre_copy.h) the pages taken from it are copied
// after that, as the job runs on (dump_pages).
class PostDumpPages {
 public:
  PostDumpPages(std::unique_ptr<criu::ActionGate> gate, std::string images, int threads,
                criu::PreCopy* ahead, criu::PagesPool* pool)
      : gate_(std::move(gate)),
        images_(std::move(images)),
        threads_(threads),
        ahead_(ahead),
        pool_(pool) {}
  ~PostDumpPages() { Join(); }

  void AddTo(criu::DumpOptions* d) const {
    for (auto& a : gate_->Args()) d->extra_args.push_back(std::move(a));
    for (auto& e : gate_->Env()) d->env.push_back(std::move(e));
    d->env.push_back(absl::StrCat(criu::kAnonPagesEnv, "=1"));
  }
  void Start() {
    thread_ = std::thread([this] {
      auto done = absl::MakeCleanup([this] {
        if (!frozen_.HasBeenNotified()) frozen_.Notify();
      });
      while (!criu_done_.load()) {
        if (!gate_->WaitArrival(absl::Milliseconds(100))) continue;
        arrived_ = true;
        auto c = criu::AnonPagesCopy::WhileFrozen(images_, threads_, ahead_, pool_);
        frozen_st_ = c.status();
        // Without a copy ahead the images are finished before CRIU goes on, as they always were.
        if (c.ok() && ahead_ == nullptr) frozen_st_ = Complete(**c);
        // With one, what was written since is known now: the tracking ends before the job runs
        // on, so that its writes (the driver's restore, the refill) take no more faults.
        if (ahead_ != nullptr) {
          const absl::Time t0 = absl::Now();
          ahead_->StopTracking();
          untrack_ = absl::Now() - t0;
        }
        if (absl::Status told = gate_->Tell(frozen_st_.ok()); !told.ok()) {
          // No verdict: the gate refuses, CRIU resumes the tasks and fails.
          CRYO_LOG(Warning) << told;
          gate_->Withdraw();
          if (frozen_st_.ok()) frozen_st_ = told;
        }
        // The pages copied ahead go into the images in Finish, once the job's GPU stages are
        // done: copied beside them they slowed the driver's restore and the refill.
        if (c.ok()) copy_ = *std::move(c);
        frozen_.Notify();  // what it says is fixed from here on (Frozen reads it)
        return;
      }
    });
  }
  // After CRIU: its own status, or the frozen copy's error where that is what failed it.
  absl::Status Frozen(absl::Status criu_status) {
    criu_done_ = true;
    frozen_.WaitForNotification();
    if (arrived_ && !frozen_st_.ok()) {
      return Annotate(frozen_st_, "copying the job's anonymous memory at CRIU's post-dump");
    }
    return criu_status;
  }
  // ... and once the whole copy is done.
  absl::Status Finish(absl::Status criu_status) {
    absl::Status st = Frozen(std::move(criu_status));
    Join();
    if (finishes_after_thaw() && copy_ != nullptr) finish_st_ = Complete(*copy_);
    copy_.reset();
    if (st.ok() && arrived_ && !finish_st_.ok()) {
      return Annotate(finish_st_, "putting the pages copied ahead of the freeze into the images");
    }
    return st;
  }
  // After Frozen: whether the pages copied ahead are still to go into the images (Finish).
  bool finishes_after_thaw() const { return arrived_ && frozen_st_.ok() && ahead_ != nullptr; }
  // After Finish.
  bool wrote() const { return arrived_ && frozen_st_.ok() && finish_st_.ok(); }
  const criu::AnonPagesResult& result() const { return result_; }
  absl::Duration untrack() const { return untrack_; }

 private:
  absl::Status Complete(criu::AnonPagesCopy& c) {
    auto r = c.Finish();
    if (!r.ok()) return r.status();
    result_ = *std::move(r);
    return absl::OkStatus();
  }
  void Join() {
    criu_done_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::unique_ptr<criu::ActionGate> gate_;
  std::string images_;
  int threads_;
  criu::PreCopy* ahead_;
  criu::PagesPool* pool_;  // only for images in cryod's tmpfs, where the pool is
  std::thread thread_;
  std::atomic<bool> criu_done_{false};
  absl::Notification frozen_;
  bool arrived_ = false;
  absl::Status frozen_st_;  // the copy while frozen (and, without a copy ahead, the rest)
  absl::Status finish_st_;  // with a copy ahead, the rest, after the thaw
  std::unique_ptr<criu::AnonPagesCopy> copy_;  // with a copy ahead, until Finish
  absl::Duration untrack_;
  criu::AnonPagesResult result_;
};

namespace {

void LogDumpPages(const CheckpointState& s, const criu::AnonPagesResult& r, int threads) {
  CRYO_LOG(Info) << "checkpoint " << s.id << ": " << r.bytes << " bytes of anonymous "
                 << "memory (" << r.tasks << " task(s), " << r.segments
                 << " shared segment(s)) copied at CRIU's post-dump by " << threads
                 << " threads in " << absl::ToInt64Milliseconds(r.copy) << " ms ("
                 << r.huge_bytes / (1 << 20) << " MiB more of the node's shared memory in huge "
                 << "pages; " << r.pooled << " pages image(s) written over " << r.pooled_bytes
                 << " bytes kept from an earlier dump; scan " << absl::ToInt64Milliseconds(r.scan)
                 << " ms, images " << absl::ToInt64Milliseconds(r.replace) << " ms); CRIU copied "
                 << r.criu_bytes << " bytes of pages itself"
                 << (r.left_to_criu ? " (some dumped by CRIU itself)" : "");
  if (s.live.pre_copy != nullptr) {
    CRYO_LOG(Info) << "checkpoint " << s.id << ": " << r.ahead_bytes
                   << " bytes taken from the copy ahead of the freeze (not written since), put "
                   << "into the images after the thaw in "
                   << absl::ToInt64Milliseconds(r.after_thaw) << " ms"
                   << (criu::PreCopyVerify()
                           ? absl::StrCat("; verified: ", r.ahead_mismatches,
                                          " page(s) of them differed from the frozen job's")
                           : "");
  }
}

}  // namespace

absl::Status Engine::Dump(CheckpointState& s) {
  hooks_.At("before-dump");
  // A leave-running checkpoint dumps into node memory when the node holds it: the job is then
  // held for CRIU, not for the store, and dump_write copies the images as it runs on.
  if (s.req.leave_running && cfg_.dump_staging_fs >= 0) {
    if (gpu::HostMemoryHolds(s.procs.expected())) {
      auto staging = DumpStaging::Make(cfg_.dump_staging_fs, s.op->id(), cfg_.pages_pool);
      if (staging.ok()) {
        s.live.dump_staging = *std::move(staging);
      } else {
        CRYO_LOG(Warning) << "checkpoint " << s.id << " dumps into the store: " << staging.status();
      }
    } else {
      CRYO_LOG(Info) << "checkpoint " << s.id << " dumps into the store (the job is held until it "
                     << "is written): cryod can have " << gpu::AvailableHostMemory()
                     << " bytes of memory (the node's available memory, or its cgroup's limit), "
                     << "short of the job's " << s.procs.expected() << " and a margin";
    }
  }
  const std::string images = s.images_dir();
  TailHasher hasher(images, !s.live.dump_staging.active() && d_.store->durable());
  hasher.Start();
  criu::DumpOptions dopt;
  absl::Status dumped;
  {
    ProgressTicker ticker(
        *s.op, Stage::kDump, [&] { return hasher.bytes_hashed(); }, s.procs.expected());
    dopt.pid = s.ctr ? d_.proc->NsPid(s.procs.target()) : s.procs.target();
    dopt.images_dir = images;
    dopt.work_dir = s.op_dir;
    // A container's job stays stopped until its writable layer is saved too, so that files
    // and memory are of the same moment; it is resumed after that when asked. So does a job
    // checkpoint's member, until every member is dumped.
    dopt.leave_running = s.req.leave_running && !s.ctr && !s.req.job_cut;
    if (s.ctr) dopt.in_container = criu::InContainer{s.ctr->init_pid, cfg_.nsexec_path, {}};
    CRYO_RETURN_IF_ERROR(
        AddGpuCriuOptions(s.live.driver.records(), &s.job, &dopt.extra_args, &dopt.env));
    dopt.job = s.job;
    if (s.live.pre_copy != nullptr) {
      s.live.pre_copy->WaitShared();
      if (s.live.pre_copy->shared_segments() > 0) {
        CRYO_LOG(Info) << "checkpoint " << s.id << ": " << s.live.pre_copy->shared_bytes()
                       << " bytes of shared memory (" << s.live.pre_copy->shared_segments()
                       << " segment(s)) copied ahead of the freeze, after the drain, in "
                       << absl::ToInt64Milliseconds(s.live.pre_copy->shared_took()) << " ms";
      }
    }
    std::shared_ptr<PostDumpPages> pages = AnonPagesBesideCriu(s, images);
    if (pages) {
      pages->AddTo(&dopt);
      pages->Start();
    }
    dumped = d_.criu->Dump(dopt, [&](pid_t criu_pid) {
      s.progress = journal::OpState::kDumping;
      s.procs.CriuStarted(criu_pid, *d_.proc);
      JournalAfter(s.JournalEntry());  // CRIU runs: recovery waits for it
    });
    if (pages) {
      dumped = pages->Frozen(std::move(dumped));
      if (dumped.ok() && pages->finishes_after_thaw()) {
        // The job goes on (gpu_resume, gpu_refill) before the pages copied ahead are in place.
        s.live.dump_pages = std::move(pages);
      } else {
        dumped = pages->Finish(std::move(dumped));
        if (pages->wrote()) {
          LogDumpPages(s, pages->result(), cfg_.dump_copy_threads);
          hasher.Provide(pages->result().pages);
        }
      }
    }
  }
  auto digests = hasher.Finish();
  // CRIU resumes the tree itself when a dump fails.
  CRYO_RETURN_IF_ERROR(dumped);
  s.procs.Dumped(!dopt.leave_running, s.ctr.has_value(), *d_.proc, jobs_);
  s.progress = journal::OpState::kDumped;
  CRYO_RETURN_IF_ERROR(JournalBefore(s.JournalEntry()));  // before the publish
  if (!digests.ok()) return Annotate(digests.status(), "checksumming images");
  s.procs.SetDigests(*std::move(digests));
  hooks_.At("after-dump");
  return absl::OkStatus();
}

bool Engine::GateProgramUsable() const {
  return !cfg_.nsexec_path.empty() && ::access(cfg_.nsexec_path.c_str(), X_OK) == 0;
}

std::string Engine::GateProgram() const {
  // cryo-gate beside cryo-nsexec: CRIU starts it at every action, and it loads a few libraries
  // where cryo-nsexec loads all of cryod's (11-12 ms a start warm, 77 ms cold on the build VM).
  const std::string gate =
      (std::filesystem::path(cfg_.nsexec_path).parent_path() / "cryo-gate").string();
  return ::access(gate.c_str(), X_OK) == 0 ? gate : cfg_.nsexec_path;
}

bool Engine::CopiesDumpPages(const CheckpointState& s) const {
  // Process mode only (a container's CRIU runs inside it, with pids of its own), and only where
  // the job's pids are cryod's: the images name the tasks by their pids.
  if (s.ctr || cfg_.dump_copy_threads <= 0 || !GateProgramUsable()) return false;
  struct stat mine, theirs;
  return ::stat("/proc/self/ns/pid", &mine) == 0 &&
         ::stat(d_.proc->PidPath(s.procs.target(), "ns/pid").c_str(), &theirs) == 0 &&
         mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev;
}

absl::Status Engine::PreCopyMemory(CheckpointState& s) {
  auto pre = std::make_unique<criu::PreCopy>();
  auto freeze_only = [&](pid_t pid, bool failed, const std::string& why) {
    if (failed) {
      CRYO_LOG(Warning) << "checkpoint " << s.id << ": pid " << pid
                        << " is copied at the freeze only: " << why;
    } else {
      CRYO_LOG(Info) << "checkpoint " << s.id << ": pid " << pid
                     << " is copied at the freeze only: " << why;
    }
  };
  for (const auto& p : s.live.fast.records()) {
    // The copy takes as much of the node's memory as the process's private memory, beside the
    // dump's images.
    const uint64_t rss = d_.proc->MemoryBytes(p.pid);
    if (p.host_registered) {
      // Host memory registered with the GPU is written by DMA, which no write-protect sees.
      freeze_only(p.pid, false, "it registered host memory with the GPU (cuMemHostRegister)");
    } else if (!gpu::HostMemoryHolds(pre->bytes() + rss + s.procs.expected())) {
      freeze_only(p.pid, false,
                  absl::StrCat("the node's memory cannot also hold a copy of its ", rss, " bytes"));
    } else if (auto tr = d_.fastpath->TrackWrites(p); !tr.ok()) {
      freeze_only(p.pid, true, tr.status().ToString());
    } else if (absl::Status a = pre->Add(p.pid, std::move(tr->uffd), cfg_.dump_copy_threads,
                                         tr->features, tr->fork_counter);
               !a.ok()) {
      freeze_only(p.pid, true, a.ToString());
    }
  }
  if (pre->empty()) return absl::OkStatus();
  CRYO_LOG(Info) << "checkpoint " << s.id << ": " << pre->bytes() << " bytes of private memory of "
                 << pre->tasks() << " process(es) copied ahead of the freeze by "
                 << cfg_.dump_copy_threads << " threads in "
                 << absl::ToInt64Milliseconds(pre->took()) << " ms";
  s.live.pre_copy = std::move(pre);
  return absl::OkStatus();
}

absl::Status Engine::PreCopySharedMemory(CheckpointState& s) {
  criu::PreCopy* pre = s.live.pre_copy.get();
  const pid_t root = s.procs.target();
  const proc::ProcReader* proc = d_.proc;
  const uint64_t held = pre->bytes() + s.procs.expected();
  pre->StartShared(
      [proc, root] {
        std::vector<pid_t> pids;
        auto tree = proc->Tree(root);
        if (tree.ok()) {
          for (const auto& p : *tree) pids.push_back(p.pid);
        }
        return pids;
      },
      cfg_.dump_copy_threads, [held](uint64_t more) { return gpu::HostMemoryHolds(held + more); });
  return absl::OkStatus();
}

void Engine::UndoPreCopy(const journal::Entry&, CheckpointLive* live) {
  if (live == nullptr) return;  // a cryod that died took its copy and its descriptors with it
  live->dump_pages.reset();     // waits for its copy from pre_copy's memory
  live->pre_copy.reset();
}

absl::Status Engine::FinishDumpPages(CheckpointState& s) {
  std::shared_ptr<PostDumpPages> pages = std::move(s.live.dump_pages);
  absl::Status st = pages->Finish(absl::OkStatus());
  if (st.ok()) {
    LogDumpPages(s, pages->result(), cfg_.dump_copy_threads);
    CRYO_LOG(Info) << "checkpoint " << s.id << ": the tracking of the job's writes ended before "
                   << "the thaw in " << absl::ToInt64Milliseconds(pages->untrack()) << " ms";
  }
  s.live.pre_copy.reset();  // the job's writes are no longer tracked
  CRYO_RETURN_IF_ERROR(st);
  const criu::AnonPagesResult& r = pages->result();
  // The dump's checksums were taken before these files were in place.
  std::map<std::string, FileDigest> digests = s.procs.digests();
  for (const auto& [name, d] : r.pages) digests[name] = d;
  for (const std::string& name : r.pagemaps) {
    CRYO_ASSIGN_OR_RETURN(digests[name], HashFile(fs::Join(s.images_dir(), name)));
  }
  s.procs.SetDigests(std::move(digests));
  return absl::OkStatus();
}

std::shared_ptr<PostDumpPages> Engine::AnonPagesBesideCriu(const CheckpointState& s,
                                                           const std::string& images) {
  if (!CopiesDumpPages(s)) return nullptr;
  auto gate =
      criu::ActionGate::Open(fs::Join(s.op_dir, "dump-gate"), GateProgram(), criu::kDumpAction);
  if (!gate.ok()) {
    CRYO_LOG(Warning) << "checkpoint " << s.id << ": " << gate.status()
                      << "; CRIU copies the job's memory itself";
    return nullptr;
  }
  return std::make_shared<PostDumpPages>(*std::move(gate), images, cfg_.dump_copy_threads,
                                         s.live.pre_copy.get(),
                                         s.live.dump_staging.active() ? cfg_.pages_pool : nullptr);
}

void Engine::UndoDump(const journal::Entry& e, CheckpointLive* live) {
  // The GPU state is rolled back here, not only in gpu_lock's undo (which runs after this
  // one), and after the job runs again: the driver restores a process only while it runs (see
  // ResumeGpus); until the unlock its CUDA calls wait.
  ProcessSet::Undo(e, jobs_, fs::Join(OpDir(e.op_id), "dump.log"), cfg_.nsexec_path);
  UndoGpu(e, live);
  CRYO_LOG(Warning) << "checkpoint " << e.checkpoint_id << " not published; job resumed";
}

absl::Status Engine::WriteDump(CheckpointState& s) {
  hooks_.At("before-dump-write");
  const uint64_t total = s.procs.DumpBytes();
  auto report = [&](uint64_t done) {
    s.op->Report(Stage::kDumpWrite, done, total, "CRIU's images, from node memory");
  };
  report(0);
  CRYO_RETURN_IF_ERROR(s.live.dump_staging.CopyTo(s.live.staged->images_dir(), s.procs.digests(),
                                                  report, [op = s.op] { return op->cancelled(); }));
  s.live.dump_staging = DumpStaging();  // its memory goes back now, not at the operation's end
  return absl::OkStatus();
}

absl::Status Engine::CheckDumpRestorable(CheckpointState& s) {
  // The bound a restore applies: the container's spec (read from its cryo-init, as the
  // replacement's will be) or, in process mode, what the job held at validate, which the
  // manifest records and signs.
  criu::CredentialCeiling ceiling = s.credentials;
  std::string whose = "the job had when it was checkpointed";
  if (s.ctr) {
    CRYO_ASSIGN_OR_RETURN(ceiling, ContainerCeiling(s.ctr->init_pid));
    whose = absl::StrCat("container ", s.ctr->info.name);
  }
  absl::Status st = CheckImageCredentials(s.images_dir(), s.ctr.has_value(), ceiling, whose);
  if (st.ok()) return st;
  return absl::Status(
      st.code(), absl::StrCat("checkpoint ", s.id, " would be refused at restore (", st.message(),
                              "); not published, the job was resumed"));
}

absl::Status Engine::SaveRootfs(CheckpointState& s) {
  CRYO_ASSIGN_OR_RETURN(s.container_files, container::SaveWritableLayer(
                                               *d_.proc, *s.ctr, s.live.staged->staging_dir()));
  return absl::OkStatus();
}

std::unique_ptr<gpu::CutParties> Engine::JobGpuParty(const CheckpointState& s) {
  if (!s.req.job_cut || !s.req.job_cut->gpu() || !s.req.job_part) return nullptr;
  Operation* op = s.op;
  return s.req.job_cut->gpu()->For(JobGpuCut::MemberParty(s.req.job_part->member),
                                   std::min(s.req.deadline, absl::Now() + s.req.job_cut_timeout),
                                   [op] { return op->cancelled(); });
}

void Engine::LeaveJobGpuCut(CheckpointState& s) {
  if (auto party = JobGpuParty(s)) party->Leave();
}

absl::Status Engine::MeetJobCut(CheckpointState& s) {
  hooks_.At("before-job-cut");
  LeaveJobGpuCut(s);  // (done with it, whatever the GPU steps did)
  const absl::Time deadline = std::min(s.req.deadline, absl::Now() + s.req.job_cut_timeout);
  return s.req.job_cut->Arrive(s.req.job_part->member, deadline,
                               [op = s.op] { return op->cancelled(); });
}

absl::Status Engine::ResumeEarly(CheckpointState& s) {
  ProcessSet::LeaveRepair(s.procs.tasks(), s.job.tcp_established, fs::Join(s.op_dir, "dump.log"),
                          s.ctr ? s.ctr->init_pid : 0, cfg_.nsexec_path);
  if (s.live.driver.empty()) s.procs.Resume(jobs_);
  return absl::OkStatus();
}

absl::Status Engine::ResumeGpus(CheckpointState& s) {
  // The job goes on as soon as its images are written; the publish happens beside it.
  // A container's job is still stopped (CRIU left it so until its files were saved) and must
  // run before the driver restores it: the driver's restore of a stopped process never
  // returned (H200, driver 580, kubelet's CheckpointContainer of a GPU pod). Until the unlock
  // its CUDA calls wait, as in process mode, where CRIU resumes the job first.
  if (s.procs.left_stopped()) s.procs.Resume(jobs_);
  return s.live.driver.Resume(*d_.gpu);
}

absl::Status Engine::BuildManifest(CheckpointState& s) {
  store::Manifest& m = s.manifest;
  m.id = s.id;
  m.kind = s.ctr ? store::CheckpointKind::kContainer : store::CheckpointKind::kProcess;
  m.workload = s.workload;
  m.node = cfg_.node_name;
  m.created_at = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", s.t_start, absl::UTCTimeZone());
  m.root_pid = s.ctr ? d_.proc->NsPid(s.procs.target()) : s.procs.target();
  m.pids = s.procs.saved_pids();
  m.tids = s.procs.saved_tids();
  m.command = s.procs.root().comm;
  m.cmdline = d_.proc->Cmdline(s.procs.target());
  m.kernel = proc::KernelRelease();
  m.arch = proc::MachineArch();
  m.criu_version = d_.criu->version();
  m.cryo_version = CRYO_VERSION;
  m.leave_running = s.req.leave_running;
  m.options = s.job;
  m.labels = s.req.labels;
  m.job = s.req.job_part;
  if (m.job) {
    m.job->pod_ips = s.pod_ips;
    m.job->former_addresses = s.former_addresses;
  }
  m.checksum_algorithm = kChecksumAlgorithm;
  for (const auto& [rel, dg] : s.procs.digests()) {
    m.files.push_back({absl::StrCat(store::kImagesDir, "/", rel), dg.size, dg.checksum});
  }
  m.files.insert(m.files.end(), s.container_files.begin(), s.container_files.end());
  const std::vector<store::ManifestFile> fast_files = s.live.fast.ManifestFiles();
  m.files.insert(m.files.end(), fast_files.begin(), fast_files.end());
  if (!s.live.driver.empty()) {
    m.gpu = d_.gpu->Describe(s.live.driver.records());
    m.gpu_processes = s.live.driver.records();
  }
  m.gpu_fastpath = s.live.fast.records();
  m.credentials = s.credentials;
  if (s.ctr) m.container = container::SectionOf(*s.ctr, d_.runtime->name());
  // Before the publish step's deadline check, so a test can let the deadline pass here.
  hooks_.At("before-publish");
  return absl::OkStatus();
}

absl::Status Engine::Publish(CheckpointState& s) {
  // The manifest records the stages up to here; the result also has publish and finish.
  s.clock->End();
  s.manifest.stage_ms = s.clock->ms();
  s.manifest.signature = store::SignManifest(s.manifest, signing_key_);
  s.clock->Begin(Stage::kPublish, s.manifest.TotalBytes());
  CRYO_RETURN_IF_ERROR(
      Annotate(s.live.staged->Publish(s.manifest), absl::StrCat("publishing checkpoint ", s.id)));
  hooks_.At("after-publish");
  s.progress = journal::OpState::kPublished;
  JournalAfter(s.JournalEntry());
  s.published_path = fs::Join(fs::Join(d_.store->location(), "checkpoints"), s.id);
  s.published_at = absl::Now();
  if (d_.metrics) {
    d_.metrics->AddBytesWritten(s.manifest.WrittenBytes());
    d_.metrics->AddBytesReferenced(s.manifest.ReferencedBytes());
  }
  return absl::OkStatus();
}

void Engine::CompletePublished(const journal::Entry& e) {
  const std::vector<journal::Task> tasks = jobs_.WithDescendants(e.tasks);
  if (e.leave_running) {
    // Resumed already when the operation ran to its end; after a crash, resume now.
    if (!e.gpu.empty()) d_.gpu->Rollback(e.gpu);
    if (!e.fastpath.empty()) {
      // The fast path's files went with the publish (and may refer to an earlier checkpoint's).
      auto dir = d_.store->LocalPath(e.checkpoint_id);
      auto m = d_.store->Get(e.checkpoint_id);
      RefillFastpath(e.fastpath, dir.ok() ? *dir : e.staging_dir, {}, m.ok() ? &*m : nullptr);
    }
    jobs_.Resume(tasks);
  } else {
    EndCheckpointedJob(e, tasks);
  }
}

void Engine::EndCheckpointedJob(const journal::Entry& e, const std::vector<journal::Task>& tasks) {
  // A container's cryo-init hears it first: it then stops with the checkpointed exit code, which
  // Kubernetes can tell from a failure. The job's GPU state dies with it.
  if (e.container_init_pid > 0 && d_.proc->Alive(e.container_init_pid)) {
    container::TellInitCheckpointed(*d_.proc, e.container_init_pid);
  }
  jobs_.Kill(tasks);
}

absl::Status Engine::Finish(CheckpointState& s) {
  if (!s.req.leave_running) EndCheckpointedJob(s.JournalEntry(), s.procs.tasks());
  // The pace stands for a whole checkpoint's write (a stop's writes everything): one that
  // referred to an earlier one's chunks wrote less in its time than the store can, so it would
  // make the node look slower than it is (and the plan skip a stop's checkpoint that fits).
  if (s.manifest.ReferencedBytes() == 0) {
    pace_.Add(s.workload, s.manifest.TotalBytes(), absl::Now() - s.t_start);
  }
  if (cfg_.retention_keep > 0) {
    std::set<std::string> in_use;
    {
      absl::MutexLock l(&mu_);
      in_use = busy_ids_;
      in_use.insert(held_refs_.begin(), held_refs_.end());
    }
    auto deleted = d_.store->ApplyRetention(s.workload, cfg_.retention_keep, in_use);
    if (deleted.ok() && !deleted->empty()) {
      CRYO_LOG(Info) << "retention: deleted " << absl::StrJoin(*deleted, ", ");
    } else if (!deleted.ok()) {
      CRYO_LOG(Warning) << "retention: " << deleted.status();
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::Export(CheckpointState& s) {
  // An incremental checkpoint's GPU data is partly in earlier ones: the archive holds it whole.
  std::map<std::string, std::string> referred;
  for (const std::string& id : s.manifest.References()) {
    auto where = d_.store->LocalPath(id);
    if (where.ok()) referred[id] = *where;
  }
  return Annotate(container::ExportKubeletArchive(s.manifest, *s.ctr, s.published_path,
                                                  fs::Join(s.op_dir, "dump.log"),
                                                  s.req.export_archive, referred),
                  absl::StrCat("checkpoint ", s.id, " is published, but its archive ",
                               s.req.export_archive, " could not be written"));
}

}  // namespace cryo::engine
