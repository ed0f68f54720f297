// The checkpoint and restore flows with a fake CRIU and a fake GPU manager, on real child
// processes and a real store in a temp dir: every failure path must leave the job running and
// nothing published.

#include "daemon/engine/engine.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/gpu/fastpath_client.h"
#include "daemon/store/checksum.h"
#include "daemon/store/signature.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "prometheus/text_serializer.h"
#include "test/daemon/engine/fakes.h"
#include "test/daemon/test_util.h"

namespace cryo::engine {
namespace {

using testing::Child;
using ::testing::Contains;
using testing::FakeCriu;
using testing::FakeGpu;
using ::testing::Not;

// A store whose publish fails, as a full disk would at the last moment.
class FailingPublishStore : public store::CheckpointStore {
 public:
  explicit FailingPublishStore(store::CheckpointStore* inner) : inner_(inner) {}
  class Staged : public store::StagedCheckpoint {
   public:
    explicit Staged(std::unique_ptr<store::StagedCheckpoint> in) : in_(std::move(in)) {}
    const std::string& id() const override { return in_->id(); }
    std::string images_dir() const override { return in_->images_dir(); }
    std::string staging_dir() const override { return in_->staging_dir(); }
    absl::Status Publish(const store::Manifest&) override {
      return absl::ResourceExhaustedError("no space left on device (injected)");
    }
    absl::Status Abort() override { return in_->Abort(); }
    std::unique_ptr<store::StagedCheckpoint> in_;
  };
  std::string location() const override { return inner_->location(); }
  absl::StatusOr<std::unique_ptr<store::StagedCheckpoint>> Stage(const std::string& id) override {
    auto s = inner_->Stage(id);
    if (!s.ok()) return s.status();
    return std::unique_ptr<store::StagedCheckpoint>(new Staged(std::move(*s)));
  }
  absl::StatusOr<store::Manifest> Get(const std::string& id) override { return inner_->Get(id); }
  absl::StatusOr<std::vector<store::Manifest>> List() override { return inner_->List(); }
  absl::Status Delete(const std::string& id) override { return inner_->Delete(id); }
  absl::Status MarkDamaged(const std::string& id, const std::string& why) override {
    return inner_->MarkDamaged(id, why);
  }
  absl::StatusOr<std::string> LocalPath(const std::string& id) override {
    return inner_->LocalPath(id);
  }
  absl::StatusOr<int> CollectIncomplete(absl::Duration t, bool own,
                                        const std::set<std::string>& keep) override {
    return inner_->CollectIncomplete(t, own, keep);
  }
  absl::StatusOr<std::vector<std::string>> ApplyRetention(
      const std::string& w, int k, const std::set<std::string>& in_use) override {
    return inner_->ApplyRetention(w, k, in_use);
  }
  absl::Status CheckWritable() override { return inner_->CheckWritable(); }
  bool OwnsStagingDir(const std::string& p) const override { return inner_->OwnsStagingDir(p); }
  absl::Status RemoveStagingDir(const std::string& p) override {
    return inner_->RemoveStagingDir(p);
  }
  absl::StatusOr<uint64_t> FreeBytes() override { return inner_->FreeBytes(); }
  absl::Status CommitJobCheckpoint(const store::JobCheckpoint& jc) override {
    return inner_->CommitJobCheckpoint(jc);
  }
  absl::StatusOr<store::JobCheckpoint> GetJobCheckpoint(const std::string& ns,
                                                        const std::string& job,
                                                        const std::string& id) override {
    return inner_->GetJobCheckpoint(ns, job, id);
  }
  absl::StatusOr<std::vector<store::JobCheckpoint>> ListJobCheckpoints(
      const std::string& ns, const std::string& job) override {
    return inner_->ListJobCheckpoints(ns, job);
  }
  absl::Status DeleteJobCheckpoint(const std::string& ns, const std::string& job,
                                   const std::string& id) override {
    return inner_->DeleteJobCheckpoint(ns, job, id);
  }

 private:
  store::CheckpointStore* inner_;
};

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::CreateLocalStore({dir_.path + "/store", "node-a", false});
    ASSERT_TRUE(s.ok());
    store_ = std::move(*s);
    auto j = journal::Journal::Open(dir_.path + "/state/journal");
    ASSERT_TRUE(j.ok());
    journal_ = std::move(*j);
    Rebuild(store_.get());
  }
  void Rebuild(store::CheckpointStore* store, const proc::ProcReader* proc = nullptr,
               std::function<absl::Status(const std::string&, bool)> fault = nullptr) {
    EngineConfig c;
    c.fault = std::move(fault);
    c.node_name = "node-a";
    c.state_dir = dir_.path + "/state";
    c.self_pid = ::getpid();
    c.pid_wait_timeout = absl::Milliseconds(200);
    c.job_gather_timeout = absl::Milliseconds(600);
    c.signing_key = std::string(32, 'k');  // the node's key survives a restart
    engine_ = std::make_unique<Engine>(
        c, EngineDeps{store, &criu_, &gpu_, journal_.get(), &metrics_, proc ? proc : &proc_});
  }
  CheckpointRequest Req(pid_t pid, const std::string& id, bool leave_running = false) {
    CheckpointRequest r;
    r.pid = pid;
    r.checkpoint_id = id;
    r.leave_running = leave_running;
    return r;
  }
  bool StagingEmpty() { return fs::ListDir(dir_.path + "/store/.staging")->empty(); }
  // Checkpoints `job` as `id` (which stops it for good) and reaps it, so its pid is free.
  void CheckpointAndReap(Child& job, const std::string& id) {
    auto r = engine_->Checkpoint(Req(job.pid, id), op_);
    ASSERT_TRUE(r.ok()) << r.status();
    ::waitpid(job.pid, nullptr, 0);
    job.pid = -1;
  }
  // A restore of `id` that must be refused with PERMISSION_DENIED saying `why`, before CRIU.
  void ExpectRefused(Engine& e, const std::string& id, const std::string& why) {
    RestoreRequest r;
    r.checkpoint_id = id;
    auto res = e.Restore(r, op_);
    EXPECT_EQ(res.status().code(), absl::StatusCode::kPermissionDenied) << res.status();
    EXPECT_NE(res.status().message().find(why), std::string::npos) << res.status();
    EXPECT_EQ(criu_.restores, 0);
  }
  bool JournalEmpty() { return journal_->LoadAll()->empty(); }
  // The journal entry of checkpoint "half" of `pid` with `steps` begun, and its stage in
  // `*stage`: the caller keeps that object through the recovery, since destroying it aborts the
  // stage, which a crash does not (a staging failure leaves staging_dir empty).
  journal::Entry HalfCheckpoint(pid_t pid, std::vector<std::string> steps, journal::OpState state,
                                std::unique_ptr<store::StagedCheckpoint>* stage) {
    journal::Entry e;
    auto staged = store_->Stage("half");
    EXPECT_TRUE(staged.ok()) << staged.status();
    if (staged.ok()) {
      e.staging_dir = (*staged)->staging_dir();
      *stage = std::move(*staged);
    }
    e.op_id = "op-9";
    e.kind = journal::OpKind::kCheckpoint;
    e.checkpoint_id = "half";
    e.state = state;
    e.steps = std::move(steps);
    e.tasks = {{pid, proc_.Read(pid)->start_time, false}};
    return e;
  }
  // What cryod left when it died after dumping a job (stopped) with `steps` journaled, then the
  // next start's recovery: the job must run again and its stage be gone.
  void RecoverAHalfCheckpoint(std::vector<std::string> steps) {
    Child job;
    ::kill(job.pid, SIGSTOP);
    std::unique_ptr<store::StagedCheckpoint> crashed;
    journal::Entry e =
        HalfCheckpoint(job.pid, std::move(steps), journal::OpState::kDumped, &crashed);
    ASSERT_FALSE(e.staging_dir.empty());
    ASSERT_TRUE(journal_->Put(e).ok());
    ASSERT_TRUE(WaitUntil([&] { return job.State() == 'T'; }));
    ASSERT_TRUE(engine_->Recover().ok());
    EXPECT_TRUE(WaitUntil([&] { return job.Runs(); })) << "job left stopped";
    EXPECT_FALSE(fs::Exists(e.staging_dir));
  }

  // An engine of this node whose jobs run the fast-path library `fp` answers for.
  std::unique_ptr<Engine> WithFastpath(gpu::Fastpath& fp) {
    EngineConfig c;
    c.node_name = "node-a";
    c.state_dir = dir_.path + "/state";
    c.self_pid = ::getpid();
    EngineDeps deps{store_.get(), &criu_, &gpu_, journal_.get(), &metrics_, &proc_};
    deps.fastpath = &fp;
    return std::make_unique<Engine>(c, deps);
  }

  TempDir dir_;
  std::unique_ptr<store::CheckpointStore> store_;
  std::unique_ptr<journal::Journal> journal_;
  FakeCriu criu_;
  FakeGpu gpu_;
  metrics::Metrics metrics_;
  proc::ProcReader proc_;
  std::unique_ptr<Engine> engine_;
  Operation op_{"op-1", "checkpoint", "test"};
};

TEST_F(EngineTest, SuccessPublishesManifestAndStopsTheJob) {
  Child job;
  auto info = engine_->Checkpoint(Req(job.pid, "c1"), op_);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->manifest.id, "c1");
  EXPECT_FALSE(criu_.last_dump.leave_running) << "dumps leave-stopped until published";
  auto m = store_->Get("c1");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->root_pid, job.pid);
  EXPECT_EQ(m->pids, std::vector<int>{job.pid});
  ASSERT_EQ(m->files.size(), 3u);  // the fake CRIU's pages, core and inventory
  for (const auto& f : m->files) {
    auto d = HashFile(dir_.path + "/store/checkpoints/c1/" + f.path);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->checksum, f.checksum) << f.path;
    EXPECT_EQ(d->size, f.size);
  }
  EXPECT_GT(m->stage_ms.count("dump"), 0u);
  EXPECT_EQ(job.State(), 'Z') << "preemption semantics: the job is killed after publish";
  EXPECT_TRUE(StagingEmpty());
  EXPECT_TRUE(JournalEmpty());
}

TEST_F(EngineTest, LeaveRunningKeepsTheJob) {
  Child job;
  ASSERT_TRUE(engine_->Checkpoint(Req(job.pid, "c1", true), op_).ok());
  EXPECT_TRUE(criu_.last_dump.leave_running);
  EXPECT_TRUE(job.Runs());
}

TEST_F(EngineTest, DumpFailureRollsBackEverything) {
  Child job;
  gpu_.use_gpu = true;
  criu_.dump_result = absl::InternalError("criu dump failed");
  auto info = engine_->Checkpoint(Req(job.pid, "c1"), op_);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(gpu_.locks, 1);
  EXPECT_EQ(gpu_.rollbacks, 1) << "GPU state restored and unlocked";
  EXPECT_TRUE(job.Runs());
  EXPECT_TRUE(StagingEmpty());
  EXPECT_TRUE(JournalEmpty());
  EXPECT_TRUE(store_->List()->empty());
}

TEST_F(EngineTest, PublishFailureResumesTheStoppedJob) {
  Child job;
  FailingPublishStore failing(store_.get());
  Rebuild(&failing);
  auto info = engine_->Checkpoint(Req(job.pid, "c1"), op_);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kResourceExhausted) << info.status();
  ASSERT_TRUE(criu_.dumped);
  EXPECT_TRUE(job.Runs()) << "the job was stopped by the dump and must run again";
  EXPECT_TRUE(StagingEmpty());
  EXPECT_TRUE(JournalEmpty());
  EXPECT_TRUE(store_->List()->empty());
}

TEST_F(EngineTest, CallersDeadlinePassedPublishesNothingAndTheJobRunsOn) {
  Child job;
  criu_.dump_delay = absl::Milliseconds(300);
  auto late = Req(job.pid, "late");
  late.deadline = absl::Now() + absl::Milliseconds(100);
  auto info = engine_->Checkpoint(late, op_);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kDeadlineExceeded) << info.status();
  EXPECT_NE(info.status().message().find("not published"), std::string::npos) << info.status();
  ASSERT_TRUE(criu_.dumped);
  EXPECT_TRUE(job.Runs()) << "the job was stopped by the dump and must run again";
  EXPECT_TRUE(StagingEmpty());
  EXPECT_TRUE(JournalEmpty());
  EXPECT_TRUE(store_->List()->empty());
  // A deadline already gone: nothing is started at all.
  criu_.dumped = false;
  late.deadline = absl::Now() - absl::Seconds(1);
  info = engine_->Checkpoint(late, op_);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kDeadlineExceeded) << info.status();
  EXPECT_FALSE(criu_.dumped);
  EXPECT_TRUE(job.Runs());
}

// The plan at a stop: a checkpoint this job's recent ones say will not finish before the stop's
// deadline is not taken when an earlier good checkpoint can stand in. The job ends (as after a
// checkpoint), nothing is staged, dumped or journaled, and the answer names the checkpoint the
// replacement resumes from and the work lost.
TEST_F(EngineTest, AStopsCheckpointThatWouldNotFitIsNotTakenWhenAnEarlierOneCanStandIn) {
  Child job;
  criu_.dump_delay = absl::Milliseconds(400);  // this job's checkpoints are slow here
  auto periodic = Req(job.pid, "w-periodic", /*leave_running=*/true);
  periodic.workload = "w";
  ASSERT_TRUE(engine_->Checkpoint(periodic, op_).ok());
  criu_.dumped = false;
  auto stop = Req(job.pid, "w-stop");
  stop.workload = "w";
  stop.plan = true;
  stop.deadline = absl::Now() + absl::Milliseconds(150);
  auto r = engine_->Checkpoint(stop, op_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->manifest.id, "w-periodic");
  EXPECT_NE(r->not_taken.find("resumes from w-periodic"), std::string::npos) << r->not_taken;
  EXPECT_GE(r->work_lost, absl::ZeroDuration());
  EXPECT_FALSE(criu_.dumped) << "no doomed checkpoint";
  EXPECT_TRUE(WaitUntil([&] { return job.State() == 'Z'; })) << "the stop's job ends";
  EXPECT_EQ(store_->Get("w-stop").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(StagingEmpty());
  EXPECT_TRUE(JournalEmpty());
}

TEST_F(EngineTest, AStopsCheckpointIsTakenWhenItFitsOrNothingCanStandIn) {
  // Nothing measured yet: taken.
  Child first;
  auto stop = Req(first.pid, "v-1");
  stop.workload = "v";
  stop.plan = true;
  stop.deadline = absl::Now() + absl::Seconds(30);
  auto r = engine_->Checkpoint(stop, op_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->not_taken.empty());
  EXPECT_TRUE(store_->Get("v-1").ok());
  // It fits the time left: taken.
  Child second;
  stop.pid = second.pid;
  stop.checkpoint_id = "v-2";
  stop.deadline = absl::Now() + absl::Seconds(30);
  r = engine_->Checkpoint(stop, op_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->not_taken.empty());
  // It would not fit, but workload "u" has no checkpoint to resume from: tried all the same
  // (it may still make it; ending the job without one would lose it all).
  criu_.dump_delay = absl::Milliseconds(300);
  Child slow;
  auto leave = Req(slow.pid, "v-3", /*leave_running=*/true);
  leave.workload = "v";
  ASSERT_TRUE(engine_->Checkpoint(leave, op_).ok());
  criu_.dump_delay = absl::ZeroDuration();
  Child other;
  auto u = Req(other.pid, "u-1");
  u.workload = "u";
  u.plan = true;
  u.deadline = absl::Now() + absl::Seconds(5);  // far below the minute it would take
  r = engine_->Checkpoint(u, op_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->not_taken.empty());
  EXPECT_TRUE(store_->Get("u-1").ok());
}

TEST_F(EngineTest, GpuLockTimeoutTouchesNothing) {
  Child job;
  gpu_.use_gpu = true;
  gpu_.lock_result = absl::DeadlineExceededError("lock did not finish in 10s");
  auto info = engine_->Checkpoint(Req(job.pid, "c1"), op_);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(criu_.dumped);
  EXPECT_EQ(gpu_.checkpoints, 0);
  EXPECT_TRUE(job.Runs());
  EXPECT_TRUE(StagingEmpty());
}

TEST_F(EngineTest, GpuCheckpointRecordedAndRestoredWhenLeftRunning) {
  Child job;
  gpu_.use_gpu = true;
  ASSERT_TRUE(engine_->Checkpoint(Req(job.pid, "g1", true), op_).ok());
  EXPECT_EQ(gpu_.checkpoints, 1);
  EXPECT_EQ(gpu_.restores, 1);
  EXPECT_EQ(gpu_.unlocks, 1);
  EXPECT_EQ(gpu_.rollbacks, 0);
  auto m = store_->Get("g1");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->gpu_processes[0].pid, job.pid);
  EXPECT_EQ(m->gpu_processes[0].plugin, "fake");
  EXPECT_EQ(m->gpu["driver"], "fake");
}

TEST_F(EngineTest, WhatAPluginNeedsOfCriuRaisesTheJobsOptionsAndTheManifestSaysSo) {
  Child job;
  gpu_.use_gpu = true;
  // The cuda plugin's answer for a job with NCCL loaded.
  gpu_.criu_extras.args = {"--link-remap", "--ghost-limit", "256M", "--plugin-flag"};
  CheckpointRequest small = Req(job.pid, "small", true);
  small.criu.link_remap = false;
  small.criu.ghost_limit = 1ull << 20;
  ASSERT_TRUE(engine_->Checkpoint(small, op_).ok());
  EXPECT_TRUE(criu_.last_dump.job.link_remap);
  EXPECT_EQ(criu_.last_dump.job.ghost_limit, 256ull << 20);
  EXPECT_EQ(criu_.last_dump.extra_args, std::vector<std::string>{"--plugin-flag"})
      << "the typed options must not be passed a second time, raw";
  auto m = store_->Get("small");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->options.link_remap);
  EXPECT_EQ(m->options.ghost_limit, 256ull << 20);

  // A job that asked for more keeps what it asked for.
  CheckpointRequest big = Req(job.pid, "big", true);
  big.criu.ghost_limit = 1ull << 30;
  ASSERT_TRUE(engine_->Checkpoint(big, op_).ok());
  EXPECT_EQ(criu_.last_dump.job.ghost_limit, 1ull << 30);
  m = store_->Get("big");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->options.ghost_limit, 1ull << 30);
}

TEST_F(EngineTest, RefusesBadTargetsBeforeTouchingAnything) {
  // A fake /proc with a kernel thread, a zombie and a tree that holds "cryod".
  TempDir p;
  auto fake = [&](int pid, int ppid, const char* comm, uint64_t flags, char state) {
    ASSERT_TRUE(fs::MakeDirs(absl::StrCat(p.path, "/", pid)).ok());
    std::string stat = absl::StrCat(pid, " (", comm, ") ", std::string(1, state), " ", ppid, " ",
                                    pid, " ", pid, " 0 -1 ", flags);
    for (int f = 10; f <= 22; ++f) absl::StrAppend(&stat, " 1");
    ASSERT_TRUE(fs::WriteFileAtomic(absl::StrCat(p.path, "/", pid, "/stat"), stat).ok());
  };
  fake(2, 0, "kthreadd", 0x00208040, 'S');
  fake(50, 1, "dead", 0x400000, 'Z');
  fake(60, 1, "parent", 0x400000, 'S');
  fake(::getpid(), 60, "cryod", 0x400000, 'S');
  proc::ProcReader reader(p.path);
  Rebuild(store_.get(), &reader);
  EXPECT_EQ(engine_->Checkpoint(Req(2, ""), op_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->Checkpoint(Req(50, ""), op_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto s = engine_->Checkpoint(Req(60, ""), op_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cryod"), std::string::npos) << s;
  EXPECT_EQ(engine_->Checkpoint(Req(1, ""), op_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->Checkpoint(Req(::getpid(), ""), op_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->Checkpoint(Req(77, ""), op_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->Checkpoint(Req(60, "../x"), op_).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(criu_.dumped);
}

// Found on 2026-11-24: a thread id given as a pid reached CRIU, which failed with an internal
// error.
TEST_F(EngineTest, AThreadIdIsRefusedNamingItsProcess) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    std::thread t([&] {
      pid_t tid = static_cast<pid_t>(::gettid());
      (void)!::write(fds[1], &tid, sizeof(tid));
      for (;;) ::pause();
    });
    for (;;) ::pause();
  }
  pid_t tid = 0;
  ASSERT_EQ(::read(fds[0], &tid, sizeof(tid)), static_cast<ssize_t>(sizeof(tid)));
  auto r = engine_->Checkpoint(Req(tid, "t1"), op_);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find(absl::StrCat("thread of process ", pid)), std::string::npos)
      << r.status();
  EXPECT_FALSE(criu_.dumped);
}

TEST_F(EngineTest, OversizedLabelsAndControlCharactersAreRefused) {
  Child job;
  auto req = Req(job.pid, "c1");
  for (int i = 0; i < 3; ++i) req.labels[absl::StrCat("k", i)] = std::string(1 << 20, 'x');
  EXPECT_EQ(engine_->Checkpoint(req, op_).status().code(), absl::StatusCode::kInvalidArgument);
  req.labels.clear();
  req.workload = "evil\x1b[2Jname";
  EXPECT_EQ(engine_->Checkpoint(req, op_).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(criu_.dumped);
  RestoreRequest rr;
  rr.checkpoint_id = "c1";
  rr.gpu_map = {{"GPU-a", ""}};
  EXPECT_EQ(engine_->Restore(rr, op_).status().code(), absl::StatusCode::kInvalidArgument);
}

// What cryod left when it died after dumping `job` (stopped) with these steps journaled; then
// the next start's recovery. Checks what every rollback must leave: the job running, no stage.
TEST_F(EngineTest, RecoverRollsBackAnUnpublishedCheckpoint) {
  RecoverAHalfCheckpoint({"stage", "dump"});
  EXPECT_TRUE(JournalEmpty());
}

// A journal written by another cryod version may name a step this one does not have: the
// steps it knows are still undone, and the unknown one is logged and counted, never skipped
// silently.
TEST_F(EngineTest, RecoveryCountsAStepItDoesNotKnow) {
  RecoverAHalfCheckpoint({"stage", "step_of_a_newer_cryod", "dump"});
  const std::string text = prometheus::TextSerializer().Serialize(metrics_.registry()->Collect());
  EXPECT_NE(text.find("cryo_recovered_operations_total{action=\"unknown_step\"} 1"),
            std::string::npos);
}

TEST_F(EngineTest, RecoverFinishesAPublishedPreemption) {
  Child job;
  ::kill(job.pid, SIGSTOP);
  journal::Entry e;
  e.op_id = "op-9";
  e.kind = journal::OpKind::kCheckpoint;
  e.checkpoint_id = "done";
  e.state = journal::OpState::kPublished;
  e.tasks = {{job.pid, proc_.Read(job.pid)->start_time}};
  ASSERT_TRUE(journal_->Put(e).ok());
  ASSERT_TRUE(engine_->Recover().ok());
  EXPECT_EQ(job.State(), 'Z');
  EXPECT_TRUE(JournalEmpty());
}

TEST_F(EngineTest, RestoreChecksBeforeStartingAnything) {
  Child job;
  ASSERT_TRUE(engine_->Checkpoint(Req(job.pid, "c1", true), op_).ok());
  RestoreRequest r;
  r.checkpoint_id = "c1";
  // The job still runs, so its pid is taken.
  auto res = engine_->Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kFailedPrecondition) << res.status();
  EXPECT_NE(res.status().message().find(std::to_string(job.pid)), std::string::npos);
  EXPECT_EQ(criu_.restores, 0);
  // A GPU mismatch is refused even before the pid check.
  gpu_.compat_result = absl::FailedPreconditionError("chip H100 != A100");
  res = engine_->Restore(r, op_);
  EXPECT_NE(res.status().message().find("chip"), std::string::npos) << res.status();
  EXPECT_EQ(criu_.restores, 0);
  r.checkpoint_id = "nope";
  EXPECT_EQ(engine_->Restore(r, op_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(EngineTest, RestoreRefusesACheckpointOfANewerCriu) {
  Child job;
  ASSERT_TRUE(engine_->Checkpoint(Req(job.pid, "c1"), op_).ok());
  ::waitpid(job.pid, nullptr, 0);
  job.pid = -1;
  RestoreRequest r;
  r.checkpoint_id = "c1";
  criu_.ver = "4.0.2";  // this node's CRIU is older than the one that took the checkpoint
  auto res = engine_->Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kFailedPrecondition) << res.status();
  EXPECT_NE(res.status().message().find("taken with CRIU 4.1.1"), std::string::npos)
      << res.status();
  EXPECT_NE(res.status().message().find("this node has CRIU 4.0.2"), std::string::npos);
  EXPECT_EQ(criu_.restores, 0);
  criu_.ver = "4.2";  // a newer CRIU reads older images
  res = engine_->Restore(r, op_);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(criu_.restores, 1);
}

// Found on 2026-11-24: a GPU map given for a checkpoint without GPU state was silently ignored
// (the caller believed the job would land on the GPUs they named).
TEST_F(EngineTest, AGpuMapForACheckpointWithoutGpuStateIsRefused) {
  Child job;
  ASSERT_TRUE(engine_->Checkpoint(Req(job.pid, "c1"), op_).ok());
  ::waitpid(job.pid, nullptr, 0);
  job.pid = -1;
  RestoreRequest r;
  r.checkpoint_id = "c1";
  r.gpu_map = {{"GPU-garbage", "not-a-gpu"}};
  auto res = engine_->Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kInvalidArgument) << res.status();
  EXPECT_NE(res.status().message().find("no GPU state"), std::string::npos) << res.status();
  EXPECT_EQ(criu_.restores, 0);
  r.gpu_map.clear();
  res = engine_->Restore(r, op_);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(criu_.restores, 1);
}

// Found on 2026-11-24: CRIU's per-operation logs (state_dir/ops/<op>) were pruned only when
// cryod started, so a long-running cryod kept every operation's logs. They are pruned after
// every checkpoint and restore, whatever its outcome.
TEST_F(EngineTest, OperationLogsArePrunedAfterEveryOperation) {
  EngineConfig c;
  c.node_name = "node-a";
  c.state_dir = dir_.path + "/state";
  c.self_pid = ::getpid();
  c.pid_wait_timeout = absl::Milliseconds(50);
  c.keep_op_logs = 2;
  Engine e(c, EngineDeps{store_.get(), &criu_, &gpu_, journal_.get(), &metrics_, &proc_});
  const std::string ops = dir_.path + "/state/ops";
  Child job;
  for (int i = 0; i < 5; ++i) {
    Operation op(absl::StrCat("op-", i), "checkpoint", "test");
    ASSERT_TRUE(e.Checkpoint(Req(job.pid, absl::StrCat("c", i), true), op).ok()) << i;
    auto left = fs::ListDir(ops);
    ASSERT_TRUE(left.ok());
    EXPECT_LE(left->size(), 2u) << "after checkpoint " << i;
  }
  EXPECT_TRUE(fs::Exists(ops + "/op-4")) << "the newest logs are kept";
  // Failed checkpoints and a failed restore (the job still holds its pids) prune too.
  criu_.dump_result = absl::InternalError("criu dump failed");
  for (int i = 5; i < 8; ++i) {
    Operation op(absl::StrCat("op-", i), "checkpoint", "test");
    EXPECT_FALSE(e.Checkpoint(Req(job.pid, absl::StrCat("c", i), true), op).ok());
    EXPECT_LE(fs::ListDir(ops)->size(), 2u) << "after failed checkpoint " << i;
  }
  RestoreRequest r;
  r.checkpoint_id = "c0";
  Operation op("op-r", "restore", "test");
  EXPECT_FALSE(e.Restore(r, op).ok());
  EXPECT_LE(fs::ListDir(ops)->size(), 2u) << "after a failed restore";
}

TEST_F(EngineTest, RestoreRunsCriuOnTheVerifiedImages) {
  Child job;
  ASSERT_TRUE(engine_->Checkpoint(Req(job.pid, "c1"), op_).ok());
  ::waitpid(job.pid, nullptr, 0);  // reap: a zombie still holds the pid
  RestoreRequest r;
  r.checkpoint_id = "c1";
  auto res = engine_->Restore(r, op_);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->root_pid, criu_.restored.back());
  EXPECT_EQ(criu_.last_restore.images_dir, dir_.path + "/store/checkpoints/c1/images");
  EXPECT_TRUE(JournalEmpty());
  job.pid = -1;
}

// The step names are written into journals: a cryod undoes what an older one began by these
// names. Renaming one is an incompatible change (as a change of the plugin ABI's layout is);
// adding one is not.
TEST_F(EngineTest, StepNamesArePinned) {
  EXPECT_EQ(engine_->CheckpointStepNames(),
            (std::vector<std::string>{
                "validate",     "plan",       "fall_back",       "stage",      "gpu_host_copy",
                "pre_copy",     "gpu_drain",  "pre_copy_shared", "gpu_lock",   "gpu_checkpoint",
                "gpu_save",     "dump",       "credentials",     "rootfs",     "job_cut",
                "resume_early", "gpu_resume", "gpu_refill",      "dump_pages", "gpu_write",
                "dump_write",   "manifest",   "publish",         "finish",     "export"}));
  EXPECT_EQ(engine_->RestoreStepNames(),
            (std::vector<std::string>{"validate", "init_handshake", "check", "gpu_fill", "verify",
                                      "credentials", "gpu_prefetch", "job_gather", "wait_pids",
                                      "ports", "journal", "rootfs", "job_hold", "criu_restore",
                                      "gpu_restore", "gpu_refill", "job_release", "done"}));
}

// docs/architecture.md lists the steps of both transactions: the same names, in the same order.
TEST_F(EngineTest, TheDocumentedStepsAreTheEngines) {
  auto doc = fs::ReadFile(CRYO_SOURCE_DIR "/docs/architecture.md");
  ASSERT_TRUE(doc.ok()) << doc.status();
  auto ticked = [](absl::string_view text) {
    std::vector<std::string> out;
    for (size_t i = text.find('`'); i != absl::string_view::npos; i = text.find('`', i)) {
      const size_t j = text.find('`', i + 1);
      if (j == absl::string_view::npos) break;
      out.emplace_back(text.substr(i + 1, j - i - 1));
      i = j + 1;
    }
    return out;
  };
  // The checkpoint table's first column.
  std::vector<std::string> checkpoint;
  const size_t table = doc->find("| step | does |");
  ASSERT_NE(table, std::string::npos);
  for (absl::string_view line : absl::StrSplit(absl::string_view(*doc).substr(table), '\n')) {
    if (line.empty()) break;
    if (!absl::StartsWith(line, "| `")) continue;
    for (auto& n : ticked(line.substr(0, line.find(" | ", 2)))) checkpoint.push_back(n);
  }
  EXPECT_EQ(checkpoint, engine_->CheckpointStepNames());
  // The restore's paragraph.
  const size_t from = doc->find("A restore is the same machinery:");
  ASSERT_NE(from, std::string::npos);
  const size_t to = doc->find("\n\n", from);
  EXPECT_EQ(ticked(absl::string_view(*doc).substr(from, to - from)), engine_->RestoreStepNames());
}

// Found in review: the sizes a job's fast path reported were published as they came (2^64-1
// bytes showed as 16384 PiB). A job that says its file holds more than it does fails the
// checkpoint (DATA_LOSS), nothing is published, the job gets its memory back and runs on.
TEST_F(EngineTest, AFastPathThatLiesAboutItsFilesIsNotPublished) {
  testing::FakeFastpath fp;
  fp.bytes = 4 << 20;
  fp.claimed = {{1 << 20, "x"}, {1 << 20, "x"}, {1 << 20, "x"}, {1 << 20, "x"}};
  auto engine = WithFastpath(fp);
  Engine& e = *engine;
  Child job;
  auto r = e.Checkpoint(Req(job.pid, "liar"), op_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find("holds 1048576 bytes; it holds 0"), std::string::npos)
      << r.status();
  EXPECT_EQ(fp.refills, 1) << "the job's memory was not given back";
  EXPECT_FALSE(store_->Get("liar").ok());
  EXPECT_TRUE(StagingEmpty());
  EXPECT_TRUE(job.Runs());
}

// A leave-running checkpoint with a library that speaks version kVersionMemory drains into
// cryod's memory, refills from it, and writes the files after (gpu_write): the published files
// hold what the library put there. An older library goes through the files as before.
TEST_F(EngineTest, ALeaveRunningCheckpointDrainsIntoCryodsMemoryOnlyWithALibraryThatSpeaksIt) {
  for (int version :
       {contract::gpu_fastpath::kVersionMemory, contract::gpu_fastpath::kVersionCut}) {
    SCOPED_TRACE(version);
    const bool memory = version >= contract::gpu_fastpath::kVersionMemory;
    testing::FakeFastpath fp;
    fp.version = version;
    fp.bytes = memory ? 3 << 20 : 0;  // (the files' path with nothing to write: 4 empty files)
    if (!memory) fp.claimed.assign(4, {0, ""});
    auto engine = WithFastpath(fp);
    Engine& e = *engine;
    Child job;
    const std::string id = absl::StrCat("lr-", version);
    CheckpointRequest req = Req(job.pid, id);
    req.leave_running = true;
    auto r = e.Checkpoint(req, op_);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(fp.drained_into_memory, memory);
    EXPECT_EQ(fp.refilled_from_memory, memory);
    EXPECT_EQ(fp.drain_files, memory ? 1u : 4u);
    EXPECT_EQ(fp.refills, 1);
    EXPECT_EQ(r->manifest.stage_ms.count("gpu_write"), memory ? 1u : 0u);
    EXPECT_EQ(r->manifest.stage_ms.count("gpu_host_copy"), memory ? 1u : 0u);
    EXPECT_TRUE(job.Runs());
    ASSERT_EQ(r->manifest.gpu_fastpath.size(), 1u);
    EXPECT_FALSE(r->manifest.gpu_fastpath[0].memory) << "published as written into files";
    EXPECT_EQ(r->manifest.gpu_fastpath[0].files, 4);
    if (!memory) continue;
    // 3 MiB is less than one 64 MiB unit: all of it in file 0, the others empty.
    auto data = fs::ReadFile(
        absl::StrCat(dir_.path, "/store/checkpoints/", id, "/", gpu::FastpathFileName(job.pid, 0)));
    ASSERT_TRUE(data.ok()) << data.status();
    ASSERT_EQ(data->size(), 3u << 20);
    size_t wrong = 0;
    for (uint64_t i = 0; i < data->size(); ++i) wrong += (*data)[i] != fp.Pattern(i);
    EXPECT_EQ(wrong, 0u);
    uint64_t listed = 0;
    for (const auto& f : r->manifest.files) {
      if (absl::StartsWith(f.path, "gpu/")) listed += f.size;
    }
    EXPECT_EQ(listed, 3u << 20);
  }
}

// Incremental GPU data: a leave-running checkpoint of GPU data that did not change refers to the
// previous one's chunks instead of writing them; the restore reads them through and the job
// gets every byte back; the referenced checkpoint is kept while anything refers to it, and a
// damaged one fails the restore with DATA_LOSS.
TEST_F(EngineTest, UnchangedGpuDataIsReferredToNotWrittenAndReadThroughOnRestore) {
  testing::FakeFastpath fp;
  fp.version = contract::gpu_fastpath::kVersionMemory;
  fp.bytes = 3 << 20;
  auto engine = WithFastpath(fp);
  Engine& e = *engine;
  Child job;
  auto first = e.Checkpoint(Req(job.pid, "inc-1", true), op_);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string file0 = gpu::FastpathFileName(job.pid, 0);
  auto listed = [](const store::Manifest& m, const std::string& path) {
    for (const auto& f : m.files) {
      if (f.path == path) return f;
    }
    return store::ManifestFile{};
  };
  EXPECT_EQ(listed(first->manifest, file0).chunks.size(), 1u);
  EXPECT_TRUE(first->manifest.References().empty());
  EXPECT_EQ(first->manifest.ReferencedBytes(), 0u);

  const auto pace = e.pace().BytesPerSecond(first->manifest.workload);
  ASSERT_TRUE(pace.has_value());
  auto second = e.Checkpoint(Req(job.pid, "inc-2", true), op_);
  ASSERT_TRUE(second.ok()) << second.status();
  // It wrote a fraction of its size: no measure of how fast a stop's checkpoint (which writes
  // everything) would go.
  EXPECT_EQ(e.pace().BytesPerSecond(first->manifest.workload), pace);
  const store::ManifestFile f2 = listed(second->manifest, file0);
  EXPECT_EQ(f2.refs, (std::map<std::string, std::vector<uint32_t>>{{"inc-1", {0}}}));
  EXPECT_EQ(f2.checksum, listed(first->manifest, file0).checksum);
  EXPECT_EQ(second->manifest.ReferencedBytes(), 3u << 20);
  struct stat st;
  const std::string path2 = absl::StrCat(dir_.path, "/store/checkpoints/inc-2/", file0);
  ASSERT_EQ(::stat(path2.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 3 << 20);
  EXPECT_EQ(st.st_blocks, 0) << "not one byte of it written";
  EXPECT_TRUE(job.Runs());

  // Kept: by `cryo rm` and by retention, while inc-2 refers to it.
  auto del = e.Delete("inc-1");
  EXPECT_EQ(del.code(), absl::StatusCode::kFailedPrecondition) << del;
  EXPECT_NE(del.message().find("inc-2"), std::string::npos) << del;
  auto kept = store_->ApplyRetention(second->manifest.workload, 1, {});
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept->empty());

  // Restored from inc-2: the library is given all 3 MiB, read through inc-1, from cryod's memory.
  ::kill(job.pid, SIGKILL);
  ::waitpid(job.pid, nullptr, 0);
  job.pid = -1;
  RestoreRequest r;
  r.checkpoint_id = "inc-2";
  auto res = e.Restore(r, op_);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_TRUE(fp.refilled_from_memory);
  ASSERT_EQ(fp.refilled.size(), 3u << 20);
  size_t wrong = 0;
  for (uint64_t i = 0; i < fp.refilled.size(); ++i) wrong += fp.refilled[i] != fp.Pattern(i);
  EXPECT_EQ(wrong, 0u);
  ::kill(res->root_pid, SIGKILL);
  ::waitpid(res->root_pid, nullptr, 0);

  // inc-1 damaged: inc-2 cannot be restored, and says which checkpoint's chunk is wrong.
  const std::string path1 = absl::StrCat(dir_.path, "/store/checkpoints/inc-1/", file0);
  int fd = ::open(path1.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "x", 1, 4096), 1);
  ::close(fd);
  res = e.Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kDataLoss) << res.status();
  EXPECT_NE(res.status().message().find("chunk 0"), std::string::npos) << res.status();
  ::kill(criu_.restored.back(), SIGKILL);

  // Once nothing refers to inc-1 any more, retention takes it.
  Child job2;
  fp.salt = 1;
  auto third = e.Checkpoint(Req(job2.pid, "inc-3", true), op_);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(third->manifest.References().empty()) << "every chunk changed";
  auto gone = store_->ApplyRetention(second->manifest.workload, 1, {});
  ASSERT_TRUE(gone.ok());
  std::sort(gone->begin(), gone->end());
  EXPECT_EQ(*gone, (std::vector<std::string>{"inc-1", "inc-2"}));

  // A checkpoint whose referred one is gone (removed behind cryod's back) is refused before
  // anything is restored, naming it.
  auto fourth = e.Checkpoint(Req(job2.pid, "inc-4", true), op_);
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_EQ(fourth->manifest.References(), (std::set<std::string>{"inc-3"}));
  ASSERT_TRUE(store_->Delete("inc-3").ok());
  ::kill(job2.pid, SIGKILL);
  ::waitpid(job2.pid, nullptr, 0);
  job2.pid = -1;
  const int restores = criu_.restores;
  r.checkpoint_id = "inc-4";
  res = e.Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kDataLoss) << res.status();
  EXPECT_NE(res.status().message().find("checkpoint inc-3"), std::string::npos) << res.status();
  EXPECT_EQ(criu_.restores, restores) << "CRIU ran for a checkpoint that cannot be whole";

  // One that refers to another workload's checkpoint (as only a holder of this node's signing
  // key could write it) is refused before anything starts: it would read that job's data.
  Child other;
  CheckpointRequest oreq = Req(other.pid, "other-1", true);
  oreq.workload = "another";
  ASSERT_TRUE(e.Checkpoint(oreq, op_).ok());
  auto m4 = store_->Get("inc-4");
  ASSERT_TRUE(m4.ok());
  for (auto& f : m4->files) {
    if (f.refs.count("inc-3")) f.refs = {{"other-1", f.refs["inc-3"]}};
  }
  m4->damaged.clear();
  m4->signature = store::SignManifest(*m4, std::string(32, 'k'));
  ASSERT_TRUE(fs::WriteFileAtomic(dir_.path + "/store/checkpoints/inc-4/manifest.json",
                                  store::ManifestToJson(*m4))
                  .ok());
  res = e.Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kPermissionDenied) << res.status();
  EXPECT_NE(res.status().message().find("another"), std::string::npos) << res.status();
  EXPECT_EQ(criu_.restores, restores);
}

// A process checkpoint restores with at most the credentials its job had, as the node that
// took it recorded and signed them: images that claim more (here a capability beyond every
// set the job had; the test runs as root, which may take any uid) are refused by name before
// CRIU runs, also when someone with the node's key re-signed them after the checkpoint.
TEST_F(EngineTest, ProcessRestoreIsBoundedByTheJobsRecordedCredentials) {
  Child job;
  auto own = criu::ReadLiveCredentials(proc_, job.pid);
  ASSERT_TRUE(own.ok()) << own.status();
  const pid_t pid = job.pid;
  CheckpointAndReap(job, "c1");
  auto m = store_->Get("c1");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->credentials.has_value());
  EXPECT_TRUE(m->credentials->uids.count(own->uid));
  EXPECT_FALSE(m->signature.empty());
  // The images rewritten with a raised bounding set, their checksums fixed and re-signed.
  criu::TaskCredentials raised = *own;
  raised.tid = pid;
  raised.caps.bnd |= uint64_t{1} << 50;
  const std::string dir = dir_.path + "/store/checkpoints/c1";
  ASSERT_TRUE(criu::WriteImageCredentials(dir + "/images", {raised}).ok());
  for (auto& f : m->files) {
    auto d = HashFile(dir + "/" + f.path);
    ASSERT_TRUE(d.ok()) << d.status();
    f.size = d->size;
    f.checksum = d->checksum;
  }
  m->signature = store::SignManifest(*m, std::string(32, 'k'));
  ASSERT_TRUE(fs::WriteFileAtomic(dir + "/manifest.json", store::ManifestToJson(*m)).ok());
  ExpectRefused(*engine_, "c1", "cap_bnd has cap 50");
}

// A checkpoint whose images a restore would refuse (here CRIU records a capability the job
// does not have) is refused before the job is stopped for good: it runs on, nothing is
// published, and the message names the field as the restore would.
TEST_F(EngineTest, ACheckpointARestoreWouldRefuseIsRefusedWhileTheJobCanRunOn) {
  Child job;
  auto own = criu::ReadLiveCredentials(proc_, job.pid);
  ASSERT_TRUE(own.ok()) << own.status();
  criu::TaskCredentials raised = *own;
  raised.tid = job.pid;
  raised.caps.bnd |= uint64_t{1} << 50;
  criu_.image_creds = {raised};
  auto info = engine_->Checkpoint(Req(job.pid, "c1"), op_);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kPermissionDenied) << info.status();
  EXPECT_NE(info.status().message().find("cap_bnd has cap 50"), std::string::npos) << info.status();
  EXPECT_NE(info.status().message().find("the job was resumed"), std::string::npos)
      << info.status();
  ASSERT_TRUE(criu_.dumped);
  EXPECT_TRUE(job.Runs()) << "the dump stopped the job; the refusal must let it run on";
  EXPECT_TRUE(StagingEmpty());
  EXPECT_TRUE(JournalEmpty());
  EXPECT_TRUE(store_->List()->empty());
  // With images a restore takes, the same job is checkpointed.
  criu_.image_creds.clear();
  CheckpointAndReap(job, "c1");
}

// A child of this test at exactly `pid` (as CRIU creates the job's tasks), sleeping; -1 when the
// pid is taken.
pid_t ChildAtPid(pid_t pid) {
  struct clone_args args;
  std::memset(&args, 0, sizeof(args));
  args.exit_signal = SIGCHLD;
  args.set_tid = reinterpret_cast<uint64_t>(&pid);
  args.set_tid_size = 1;
  const long r = ::syscall(SYS_clone3, &args, sizeof(args));
  if (r == 0) {
    for (;;) ::pause();
  }
  return r > 0 ? static_cast<pid_t>(r) : -1;
}

// A CRIU that ends before it finishes (here at the caller's deadline) has already created some of
// the job's tasks, re-parented away from it: the rollback kills them by the checkpoint's pids,
// which were free before CRIU started, and says so; nothing half-restored runs on.
TEST_F(EngineTest, ARestoreCriuDidNotFinishLeavesNothingOfTheJobRunning) {
  Child job;
  const pid_t pid = job.pid;
  CheckpointAndReap(job, "c1");
  pid_t left = -1;
  criu_.restore_hook = [&](const criu::RestoreOptions&) -> absl::StatusOr<pid_t> {
    left = ChildAtPid(pid);
    return absl::DeadlineExceededError("CRIU was stopped at the caller's deadline");
  };
  RestoreRequest r;
  r.checkpoint_id = "c1";
  auto res = engine_->Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kDeadlineExceeded) << res.status();
  ASSERT_EQ(left, pid) << "the test could not take the checkpoint's pid";
  int status = 0;
  const bool ended =
      WaitUntil([&] { return ::waitpid(left, &status, WNOHANG) == left; }, absl::Seconds(5));
  if (!ended) {
    ::kill(left, SIGKILL);
    ::waitpid(left, nullptr, 0);
  }
  ASSERT_TRUE(ended) << "the half-restored task was left running";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_TRUE(JournalEmpty());
}

// CRIU reads every image of the directory by name, listed or not: files the signed manifest does
// not list (here the ghost-file trick that makes CRIU create a device node) are refused by name
// before anything runs, and the checkpoint is not marked damaged by whoever planted them.
TEST_F(EngineTest, FilesTheManifestDoesNotListAreRefusedByName) {
  Child job;
  CheckpointAndReap(job, "c1");
  const std::string dir = dir_.path + "/store/checkpoints/c1";
  ASSERT_TRUE(fs::WriteFileAtomic(dir + "/images/remap-fpath.img", "x").ok());
  ASSERT_TRUE(fs::WriteFileAtomic(dir + "/images/ghost-file-9.img", "x").ok());
  ExpectRefused(*engine_, "c1", "2 file(s) its manifest does not list");
  ExpectRefused(*engine_, "c1", "images/remap-fpath.img");
  ExpectRefused(*engine_, "c1", "images/ghost-file-9.img");
  EXPECT_TRUE(store_->Get("c1")->damaged.empty());
  // A directory or a link of its own is as foreign.
  ::unlink((dir + "/images/remap-fpath.img").c_str());
  ::unlink((dir + "/images/ghost-file-9.img").c_str());
  ASSERT_EQ(::symlink("/dev/mem", (dir + "/mem").c_str()), 0);
  ExpectRefused(*engine_, "c1", "(mem)");
  ::unlink((dir + "/mem").c_str());
  ASSERT_TRUE(fs::MakeDirs(dir + "/extra").ok());
  ExpectRefused(*engine_, "c1", "(extra/)");
}

// What a store writer can do to a signed checkpoint: raise its recorded credentials, or have it
// signed by nobody this node trusts. Each is refused before CRIU runs.
TEST_F(EngineTest, ATamperedOrForeignManifestIsNotRestoredAsAProcess) {
  Child job;
  CheckpointAndReap(job, "c1");
  const std::string path = dir_.path + "/store/checkpoints/c1/manifest.json";
  auto text = fs::ReadFile(path);
  ASSERT_TRUE(text.ok());
  auto j = nlohmann::json::parse(*text);
  j["credentials"]["uids"].push_back(0);
  j["credentials"]["cap_eff"] = ~uint64_t{0};
  ASSERT_TRUE(fs::WriteFileAtomic(path, j.dump()).ok());
  ExpectRefused(*engine_, "c1", "signature");
  // Unsigned altogether.
  j.erase("signature");
  ASSERT_TRUE(fs::WriteFileAtomic(path, j.dump()).ok());
  ExpectRefused(*engine_, "c1", "not signed");
}

TEST_F(EngineTest, AnotherNodesKeyDoesNotVerify) {
  Child job;
  CheckpointAndReap(job, "c1");
  EngineConfig c;
  c.node_name = "node-b";
  c.state_dir = dir_.path + "/state-b";
  c.self_pid = ::getpid();
  c.signing_key = std::string(32, 'b');
  Engine other(c, EngineDeps{store_.get(), &criu_, &gpu_, journal_.get(), &metrics_, &proc_});
  ExpectRefused(other, "c1", "signed with another key");
}

// A job checkpoint's part (issue 37) is restored only as part of its job checkpoint: not before
// the record is written, not when the record is not one this node's key signed, and it is listed
// as uncommitted until then.
TEST_F(EngineTest, AJobCheckpointsPartIsRestoredOnlyOnceCommitted) {
  Child job;
  CheckpointAndReap(job, "c1");
  // Made member "left"'s part of job checkpoint j1 of ml/sum, as a job checkpoint writes it.
  const std::string key(32, 'k');
  store::Manifest m = *store_->Get("c1");
  m.job = store::JobPart{"ml", "sum", "j1", "left", {}, {}};
  m.signature = store::SignManifest(m, key);
  ASSERT_TRUE(fs::WriteFileAtomic(dir_.path + "/store/checkpoints/c1/manifest.json",
                                  store::ManifestToJson(m))
                  .ok());
  auto listed = engine_->List("");
  ASSERT_TRUE(listed.ok() && listed->size() == 1u);
  EXPECT_NE((*listed)[0].job_uncommitted.find("never committed"), std::string::npos)
      << (*listed)[0].job_uncommitted;
  EXPECT_FALSE(engine_->NewestGood(m.workload)) << "an uncommitted part is no checkpoint to use";
  RestoreRequest r;
  r.checkpoint_id = "c1";
  auto res = engine_->Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kFailedPrecondition) << res.status();
  EXPECT_NE(res.status().message().find("never restored alone"), std::string::npos);
  EXPECT_EQ(criu_.restores, 0);

  store::JobCheckpoint jc;
  jc.id = "j1";
  jc.namespace_ = "ml";
  jc.job = "sum";
  jc.created_at = m.created_at;
  jc.members = {{"left", "c1", "node-a", store::ManifestDigest(m)}};
  jc.signature = store::SignJobCheckpoint(jc, key);
  ASSERT_TRUE(store_->CommitJobCheckpoint(jc).ok());
  listed = engine_->List("");
  ASSERT_TRUE(listed.ok() && listed->size() == 1u);
  EXPECT_EQ((*listed)[0].job_uncommitted, "");
  res = engine_->Restore(r, op_);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(criu_.restores, 1);
  // A record rewritten by whoever can write the store (unsigned, or signed by nobody of ours).
  jc.signature.clear();
  ASSERT_TRUE(
      fs::WriteFileAtomic(dir_.path + "/store/jobs/ml+sum+j1.json", store::JobCheckpointToJson(jc))
          .ok());
  res = engine_->Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kPermissionDenied) << res.status();
  EXPECT_EQ(criu_.restores, 1);
  ASSERT_TRUE(store_->DeleteJobCheckpoint("ml", "sum", "j1").ok());
  ASSERT_EQ(store_->Get("c1").status().code(), absl::StatusCode::kNotFound) << "parts go too";
}

// The plan at a member's stop (issue 37): when the slowest part will not fit the time left and
// the job has a good committed job checkpoint, none is taken, no member is touched, and the
// answer names the one the replacements resume from. Without one, it is taken.
TEST_F(EngineTest, AJobCheckpointThatCannotFitAStopFallsBackToTheNewestCommittedOne) {
  Child old;
  CheckpointAndReap(old, "c1");  // measures this node's pace, too
  const std::string key(32, 'k');
  store::Manifest m = *store_->Get("c1");
  m.job = store::JobPart{"ml", "sum", "j1", "left", {}, {}};
  ASSERT_TRUE(fs::WriteFileAtomic(dir_.path + "/store/checkpoints/c1/manifest.json",
                                  store::ManifestToJson(m))
                  .ok());
  Child job;
  JobCheckpointRequest req;
  req.namespace_ = "ml";
  req.job = "sum";
  req.plan = true;
  req.members.push_back({"left", Req(job.pid, "", /*leave_running=*/true), ""});
  req.deadline = absl::Now() + absl::Milliseconds(1);  // a part takes longer than that
  // No committed job checkpoint yet: nothing to fall back to, so it is tried (here it misses
  // its deadline; the job runs on).
  criu_.dumped = false;
  auto tried = engine_->CheckpointJob(req, op_);
  EXPECT_FALSE(tried.ok() && !tried->not_taken.empty());

  store::JobCheckpoint jc;
  jc.id = "j1";
  jc.namespace_ = "ml";
  jc.job = "sum";
  jc.created_at = m.created_at;
  jc.members = {{"left", "c1", "node-a", store::ManifestDigest(m)}};
  jc.signature = store::SignJobCheckpoint(jc, key);
  ASSERT_TRUE(store_->CommitJobCheckpoint(jc).ok());
  criu_.dumped = false;
  req.deadline = absl::Now() + absl::Milliseconds(1);
  auto r = engine_->CheckpointJob(req, op_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->record.id, "j1");
  EXPECT_TRUE(r->parts.empty());
  EXPECT_NE(r->not_taken.find("resume from job checkpoint j1"), std::string::npos) << r->not_taken;
  EXPECT_FALSE(criu_.dumped) << "no member was dumped";
  EXPECT_EQ(::kill(job.pid, 0), 0) << "no member was touched";
  // Time enough: taken.
  req.deadline = absl::Now() + absl::Minutes(5);
  req.id = "j2";
  auto taken = engine_->CheckpointJob(req, op_);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE(taken->not_taken.empty());
  EXPECT_EQ(taken->record.id, "j2");
}

// A member's part waits for the other members' replacements (job_gather): one that never comes
// fails the restore naming it, nothing restored; another member resuming a newer job
// checkpoint makes this one give way at once.
TEST_F(EngineTest, AJobMembersPartWaitsForTheOthersAndAnOlderCutGivesWay) {
  Child a, b, c;
  CheckpointAndReap(a, "c1");
  CheckpointAndReap(b, "c2");
  CheckpointAndReap(c, "c3");
  const std::string key(32, 'k');
  auto part = [&](const std::string& id, const std::string& member, const std::string& jcid) {
    store::Manifest m = *store_->Get(id);
    m.job = store::JobPart{"ml", "sum", jcid, member, {}, {}};
    m.signature = store::SignManifest(m, key);
    EXPECT_TRUE(fs::WriteFileAtomic(dir_.path + "/store/checkpoints/" + id + "/manifest.json",
                                    store::ManifestToJson(m))
                    .ok());
    return m;
  };
  auto commit = [&](const std::string& jcid, const std::string& at,
                    const std::vector<store::Manifest>& parts) {
    store::JobCheckpoint jc;
    jc.id = jcid;
    jc.namespace_ = "ml";
    jc.job = "sum";
    jc.created_at = at;
    for (const auto& m : parts) {
      jc.members.push_back({m.job->member, m.id, "node-a", store::ManifestDigest(m)});
    }
    jc.signature = store::SignJobCheckpoint(jc, key);
    ASSERT_TRUE(store_->CommitJobCheckpoint(jc).ok());
  };
  commit("j1", "2026-11-29T05:00:00Z", {part("c1", "left", "j1"), part("c2", "right", "j1")});
  RestoreRequest r;
  r.checkpoint_id = "c1";
  auto res = engine_->Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kDeadlineExceeded) << res.status();
  EXPECT_NE(res.status().message().find("member(s) right of job ml/sum (1 of 2 ready)"),
            std::string::npos)
      << res.status();
  EXPECT_EQ(criu_.restores, 0) << "nothing was restored";
  auto arrived = store_->JobArrivals("ml", "sum");
  ASSERT_TRUE(arrived.ok() && arrived->size() == 1u);
  EXPECT_EQ((*arrived)[0].member, "left");
  EXPECT_EQ((*arrived)[0].job_checkpoint, "j1");
  EXPECT_EQ((*arrived)[0].state, store::JobArrival::State::kFailed)
      << "a member that gave up says so: the others do not count on it";

  // Right's replacement failed its restore: it is not coming, left waits on for another.
  using State = store::JobArrival::State;
  ASSERT_TRUE(
      store_
          ->MarkJobArrival("ml", "sum", {"right", "j1", "node-b", absl::Now(), {}, State::kFailed})
          .ok());
  res = engine_->Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kDeadlineExceeded) << res.status();
  EXPECT_EQ(criu_.restores, 0);

  // Right's replacement arrived and was restored: left resumes, and once every member is back
  // its arrival goes, so that a later resume of j1 meets only its own replacements.
  ASSERT_TRUE(store_
                  ->MarkJobArrival("ml", "sum",
                                   {"right", "j1", "node-b", absl::Now(), {}, State::kRestored})
                  .ok());
  res = engine_->Restore(r, op_);
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(criu_.restores, 1);
  arrived = store_->JobArrivals("ml", "sum");
  ASSERT_TRUE(arrived.ok());
  ASSERT_EQ(arrived->size(), 1u);
  EXPECT_EQ((*arrived)[0].member, "right") << "left's arrival was removed";

  // Member right's replacement resumes a newer job checkpoint: left's, of the older, gives way.
  ASSERT_TRUE(
      store_
          ->MarkJobArrival("ml", "sum", {"right", "j2", "node-b", absl::Now(), {}, State::kArrived})
          .ok());
  commit("j2", "2026-11-29T06:00:00Z", {part("c3", "right", "j2")});
  res = engine_->Restore(r, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kFailedPrecondition) << res.status();
  EXPECT_NE(res.status().message().find("resumes the newer job checkpoint 'j2'"), std::string::npos)
      << res.status();
  EXPECT_EQ(criu_.restores, 1);
}

// Each step of a checkpoint failing in turn, before it ran and after it ran, for a preemption
// and a leave-running checkpoint of a GPU job: the job runs on, nothing is published or
// staged, the journal is empty, the GPU state was given back whenever it had been taken, and
// the pids and id are free again (the next attempt succeeds).
TEST_F(EngineTest, EveryCheckpointStepFailingRollsBackEverything) {
  int cases = 0, expected_cases = 0;
  for (bool leave_running : {false, true}) {
    // The steps that apply to this job (a GPU job, no fast path), as a clean run passes them;
    // up to the commit: the steps after it complete a published checkpoint and undo nothing.
    std::vector<std::string> steps;
    {
      Rebuild(store_.get(), nullptr, [&](const std::string& step, bool a) {
        if (!a) steps.push_back(step);
        return absl::OkStatus();
      });
      gpu_ = FakeGpu();
      gpu_.use_gpu = true;
      Child dry;
      Operation op("op-dry", "checkpoint", "test");
      ASSERT_TRUE(engine_->Checkpoint(Req(dry.pid, "c1", leave_running), op).ok());
      ASSERT_TRUE(store_->Delete("c1").ok());
    }
    auto publish = std::find(steps.begin(), steps.end(), "publish");
    ASSERT_NE(publish, steps.end());
    steps.erase(publish + 1, steps.end());
    for (const char* must : {"validate", "stage", "gpu_lock", "gpu_checkpoint", "dump"}) {
      EXPECT_THAT(steps, Contains(must));
    }
    EXPECT_EQ(absl::c_count(steps, "gpu_resume"), leave_running ? 1 : 0);
    // A job without the fast path passes none of its steps, and is journaled for none.
    EXPECT_THAT(steps, Not(Contains("gpu_drain")));
    expected_cases += 2 * static_cast<int>(steps.size()) - 1;
    for (const std::string& failing : steps) {
      for (bool after : {false, true}) {
        if (failing == "publish" && after) continue;  // past the commit: nothing rolls back
        SCOPED_TRACE(absl::StrCat(failing, after ? " (after it ran)" : " (before it ran)",
                                  leave_running ? ", leave running" : ", preemption"));
        Rebuild(store_.get(), nullptr, [&](const std::string& step, bool a) {
          return step == failing && a == after ? absl::UnavailableError("injected")
                                               : absl::OkStatus();
        });
        gpu_ = FakeGpu();
        gpu_.use_gpu = true;
        Child job;
        Operation op("op-f", "checkpoint", "test");
        auto r = engine_->Checkpoint(Req(job.pid, "c1", leave_running), op);
        EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
        EXPECT_TRUE(job.Runs()) << "state " << job.State();
        EXPECT_TRUE(store_->List()->empty());
        EXPECT_TRUE(StagingEmpty());
        EXPECT_TRUE(JournalEmpty());
        // Locked or checkpointed GPU state is always given back.
        EXPECT_EQ(gpu_.locks > 0, gpu_.rollbacks > 0 || gpu_.unlocks > 0)
            << gpu_.locks << " locks, " << gpu_.rollbacks << " rollbacks";
        // Nothing is left claimed: the same checkpoint goes through now.
        Rebuild(store_.get());
        Operation op2("op-g", "checkpoint", "test");
        ASSERT_TRUE(engine_->Checkpoint(Req(job.pid, "c1", true), op2).ok());
        ASSERT_TRUE(store_->Delete("c1").ok());
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, expected_cases);
}

// Each restore step failing in turn: no restored process is left behind, nothing is journaled,
// and the checkpoint stays restorable.
TEST_F(EngineTest, EveryRestoreStepFailingLeavesNothingRestored) {
  Child job;
  ASSERT_TRUE(engine_->Checkpoint(Req(job.pid, "c1"), op_).ok());
  ::waitpid(job.pid, nullptr, 0);
  job.pid = -1;
  // The steps that apply to this restore, as a clean run passes them.
  std::vector<std::string> steps;
  {
    Rebuild(store_.get(), nullptr, [&](const std::string& step, bool a) {
      if (!a) steps.push_back(step);
      return absl::OkStatus();
    });
    RestoreRequest r;
    r.checkpoint_id = "c1";
    Operation op("op-dry", "restore", "test");
    auto res = engine_->Restore(r, op);
    ASSERT_TRUE(res.ok()) << res.status();
    ::kill(res->root_pid, SIGKILL);
    ::waitpid(res->root_pid, nullptr, 0);
    ASSERT_TRUE(WaitUntil([&] {
      auto st = proc_.Read(res->root_pid);
      return !st.ok() || st->state == 'Z';
    }));
  }
  for (const char* must : {"validate", "verify", "credentials", "ports", "criu_restore", "done"}) {
    EXPECT_THAT(steps, Contains(must));
  }
  for (const std::string& failing : steps) {
    for (bool after : {false, true}) {
      if (failing == "done" && after) continue;
      SCOPED_TRACE(absl::StrCat(failing, after ? " (after it ran)" : " (before it ran)"));
      Rebuild(store_.get(), nullptr, [&](const std::string& step, bool a) {
        return step == failing && a == after ? absl::UnavailableError("injected")
                                             : absl::OkStatus();
      });
      const size_t restored_before = criu_.restored.size();
      RestoreRequest r;
      r.checkpoint_id = "c1";
      Operation op("op-r", "restore", "test");
      auto res = engine_->Restore(r, op);
      EXPECT_EQ(res.status().code(), absl::StatusCode::kUnavailable) << res.status();
      for (size_t i = restored_before; i < criu_.restored.size(); ++i) {
        auto st = proc_.Read(criu_.restored[i]);
        EXPECT_TRUE(!st.ok() || st->state == 'Z')
            << "restored pid " << criu_.restored[i] << " left running";
      }
      EXPECT_TRUE(JournalEmpty());
    }
  }
  Rebuild(store_.get());
  RestoreRequest r;
  r.checkpoint_id = "c1";
  EXPECT_TRUE(engine_->Restore(r, op_).ok());
}

// Recovery replays whatever prefix of the checkpoint's steps the journal recorded through the
// same undos: the stopped job runs again, the stage is gone, GPU state is rolled back.
TEST_F(EngineTest, RecoveryUndoesEveryRecordedPrefixOfSteps) {
  const std::vector<std::string> all = {"stage", "gpu_lock", "dump"};
  for (size_t n = 1; n <= all.size(); ++n) {
    std::vector<std::string> steps(all.begin(), all.begin() + n);
    SCOPED_TRACE(absl::StrJoin(steps, ","));
    gpu_ = FakeGpu();
    Child job;
    if (n == 3) ::kill(job.pid, SIGSTOP);  // the dump left it stopped
    // What a crash leaves: the directory, no object to abort it. The object is kept until
    // recovery is checked, so that it aborts nothing before.
    std::unique_ptr<store::StagedCheckpoint> crashed;
    journal::Entry e = HalfCheckpoint(
        job.pid, steps, n == 3 ? journal::OpState::kDumped : journal::OpState::kStarted, &crashed);
    ASSERT_FALSE(e.staging_dir.empty());
    if (n >= 2) e.gpu = {{job.pid, "fake", nlohmann::json::object(), 0}};
    ASSERT_TRUE(journal_->Put(e).ok());
    ASSERT_TRUE(engine_->Recover().ok());
    EXPECT_TRUE(WaitUntil([&] { return job.Runs(); })) << "job left stopped";
    EXPECT_FALSE(fs::Exists(e.staging_dir));
    EXPECT_EQ(gpu_.rollbacks > 0, n >= 2);
    EXPECT_TRUE(JournalEmpty());
  }
}

// Found on 2026-11-24: a job stopped by its owner before a checkpoint that then failed was
// resumed by the rollback (and by recovery).
TEST_F(EngineTest, AJobStoppedBeforeAFailedCheckpointStaysStopped) {
  Child job;
  ::kill(job.pid, SIGSTOP);
  ASSERT_TRUE(WaitUntil([&] { return job.State() == 'T'; }));
  FailingPublishStore failing(store_.get());
  Rebuild(&failing);
  auto info = engine_->Checkpoint(Req(job.pid, "c1"), op_);
  EXPECT_FALSE(info.ok());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(job.State(), 'T') << "the rollback resumed a job its owner had stopped";
  // Recovery likewise.
  journal::Entry e;
  e.op_id = "op-9";
  e.kind = journal::OpKind::kCheckpoint;
  e.checkpoint_id = "x";
  e.state = journal::OpState::kDumped;
  e.steps = {"dump"};
  e.tasks = {{job.pid, proc_.Read(job.pid)->start_time, true}};
  ASSERT_TRUE(journal_->Put(e).ok());
  Rebuild(store_.get());
  ASSERT_TRUE(engine_->Recover().ok());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(job.State(), 'T');
}

// Found on 2026-11-24: recovery removed whatever directory a journal entry named.
// The journal is not fsynced and outlives only cryod; an entry found after a reboot (another
// boot id) names processes that ended with that boot, and its pids may be other processes now:
// recovery acts on none of them (here a live, stopped process whose pid and start time the entry
// holds, which a "published" preemption would kill) and collects the stage.
TEST_F(EngineTest, RecoveryLeavesEntriesOfAnEarlierBootAlone) {
  Child job;
  ::kill(job.pid, SIGSTOP);
  std::unique_ptr<store::StagedCheckpoint> crashed;
  journal::Entry e =
      HalfCheckpoint(job.pid, {"stage", "dump"}, journal::OpState::kPublished, &crashed);
  auto before = journal::Journal::Open(journal_->dir(), "boot-before-the-reboot");
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE((*before)->Put(e).ok());
  auto found = journal_->LoadAll();
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].boot_id, "boot-before-the-reboot");
  EXPECT_TRUE(journal_->OfEarlierBoot((*found)[0]));
  ASSERT_TRUE(WaitUntil([&] { return job.State() == 'T'; }));

  ASSERT_TRUE(engine_->Recover().ok());
  EXPECT_EQ(job.State(), 'T') << "a process the entry names was killed or continued";
  EXPECT_TRUE(JournalEmpty());
  EXPECT_FALSE(fs::Exists(e.staging_dir));
  const std::string text = prometheus::TextSerializer().Serialize(metrics_.registry()->Collect());
  EXPECT_NE(text.find("cryo_recovered_operations_total{action=\"earlier_boot\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("cryo_recovered_operations_total{action=\"completed_stopped\"} 0"),
            std::string::npos);
  ::kill(job.pid, SIGCONT);
}

TEST_F(EngineTest, RecoveryRemovesOnlyThisStoresStagingDirectories) {
  TempDir outside;
  ASSERT_TRUE(fs::WriteFileAtomic(outside.path + "/precious", "x").ok());
  journal::Entry e;
  e.op_id = "op-9";
  e.kind = journal::OpKind::kCheckpoint;
  e.checkpoint_id = "x";
  e.state = journal::OpState::kStarted;
  e.steps = {"stage"};
  e.staging_dir = outside.path;
  ASSERT_TRUE(journal_->Put(e).ok());
  ASSERT_TRUE(engine_->Recover().ok());
  EXPECT_TRUE(fs::Exists(outside.path + "/precious"));
}

TEST_F(EngineTest, ACancelledCheckpointRollsBackAndSaysSo) {
  Child job;
  Operation op("op-c", "checkpoint", "test");
  Rebuild(store_.get(), nullptr, [&](const std::string& step, bool after) {
    if (step == "dump" && after) op.Cancel("the client asked");
    return absl::OkStatus();
  });
  auto r = engine_->Checkpoint(Req(job.pid, "c1"), op);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
  EXPECT_NE(r.status().message().find("the client asked"), std::string::npos);
  EXPECT_TRUE(job.Runs());
  EXPECT_TRUE(store_->List()->empty());
}

}  // namespace
}  // namespace cryo::engine

namespace cryo::engine {
namespace {

TEST(CheckNcclSharingTest, RanksSharingMemoryNeedTheFastPathThatCarriesIt) {
  std::vector<gpu::GpuProcess> gpu(2);
  gpu[0].pid = 100;
  gpu[1].pid = 101;
  gpu[0].facts = {{"nccl_ipc", true}};
  gpu[1].facts = {{"nccl_ipc", true}};
  std::vector<gpu::FastpathProcess> fast(2);
  fast[0].pid = 100;
  fast[1].pid = 101;
  // Without the fast path (or with a library that cannot carry shared memory): refused.
  absl::Status none = CheckNcclSharing(gpu, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(none)) << none;
  EXPECT_THAT(std::string(none.message()), ::testing::HasSubstr("NCCL_P2P_DISABLE=1"));
  fast[0].version = fast[1].version = 1;
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckNcclSharing(gpu, fast)));
  // One rank carried, the other not: refused, naming it.
  fast[0].version = contract::gpu_fastpath::kVersionCut;
  absl::Status half = CheckNcclSharing(gpu, fast);
  EXPECT_THAT(std::string(half.message()), ::testing::HasSubstr("pid 101"));
  fast[1].version = contract::gpu_fastpath::kVersionCut;
  EXPECT_TRUE(CheckNcclSharing(gpu, fast).ok());
  // Ranks that share nothing, or one process alone, need nothing.
  gpu[0].facts = gpu[1].facts = nlohmann::json::object();
  EXPECT_TRUE(CheckNcclSharing(gpu, {}).ok());
}

}  // namespace
}  // namespace cryo::engine
