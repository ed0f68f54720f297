// Container mode through the engine, with a fake runtime and a fake /proc describing a container
// whose cryo-init and job are real children of the test: the checkpoint saves the writable layer
// and the container section beside the images; a restore into the wrong container, or one of
// another image, is refused before anything starts and cryo-init hears why.

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "daemon/engine/engine.h"
#include "daemon/store/checksum.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/contract/archive.h"
#include "test/daemon/container/fake_container.h"
#include "test/daemon/engine/fakes.h"
#include "test/daemon/test_util.h"

namespace cryo::engine {
namespace {

using cryo::testing::FakeContainerRuntime;
using cryo::testing::FakeProc;
using ::testing::HasSubstr;

class ContainerEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::CreateLocalStore({dir_.path + "/store", "node-a", false});
    ASSERT_TRUE(s.ok());
    store_ = std::move(*s);
    auto j = journal::Journal::Open(dir_.path + "/state/journal");
    ASSERT_TRUE(j.ok());
    journal_ = std::move(*j);
    // The container's writable layer: one file written, one deleted (a whiteout).
    upper_ = dir_.path + "/upper";
    ASSERT_TRUE(fs::MakeDirs(upper_ + "/data").ok());
    ASSERT_TRUE(fs::WriteFileAtomic(upper_ + "/data/progress", "step 42\n").ok());
    init_ = cryo::testing::SleepingChild();
    job_ = cryo::testing::SleepingChild();
    AddInit(/*restore_from=*/"");
    FakeProc::Process job;
    job.pid = job_;
    job.ppid = init_;
    job.pidns = "pid:[777]";
    job.comm = "train";
    fake_.Add(job);
    runtime::ContainerInfo c;
    c.id = "c0ffee0000000000";
    c.name = "trainer";
    c.state = runtime::ContainerInfo::State::kRunning;
    c.pid = init_;
    c.image = "example/train:1";
    c.image_ref = "sha256:abc";
    c.created_at_ns = 1764000000000000000;
    rt_.containers[c.id] = c;
    EngineConfig cfg;
    cfg.node_name = "node-a";
    cfg.state_dir = dir_.path + "/state";
    cfg.self_pid = ::getpid();
    cfg.nsexec_path = "/bin/true";  // present; never run before the steps these tests reach
    cfg.pid_wait_timeout = absl::Milliseconds(200);
    engine_ = std::make_unique<Engine>(
        cfg, EngineDeps{store_.get(), &criu_, &gpu_, journal_.get(), &metrics_, &proc_, &rt_});
  }
  // A leave-running checkpoint "ct-1" of the container.
  void CheckpointCt1() {
    CheckpointRequest req;
    req.container_id = "c0ffee0000000000";
    req.checkpoint_id = "ct-1";
    req.leave_running = true;
    auto r = engine_->Checkpoint(req, op_);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  // ... then the job gone from it (as in a new container waiting for its restore).
  void CheckpointAndEmpty() {
    CheckpointCt1();
    fake_.Remove(job_);
  }
  void TearDown() override {
    cryo::testing::Reap(init_);
    cryo::testing::Reap(job_);
  }
  void AddInit(const std::string& restore_from, const std::string& creds = "",
               const std::string& userns = "") {
    FakeProc::Process init;
    init.creds = creds;
    init.userns = userns;
    init.pid = init_;
    init.exe = CRYO_INIT_CONTAINER_PATH;
    init.comm = "cryo-init";
    init.pidns = "pid:[777]";
    if (!restore_from.empty()) init.env = {absl::StrCat(CRYO_INIT_RESTORE_ENV, "=", restore_from)};
    init.mountinfo = absl::StrCat(
        "100 90 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=", upper_,
        ",workdir=/w\n");
    fake_.Remove(init_);
    fake_.Add(init);
  }

  TempDir dir_;
  std::string upper_;
  FakeProc fake_{dir_.path + "/proc"};
  proc::ProcReader proc_{dir_.path + "/proc"};
  FakeContainerRuntime rt_;
  std::unique_ptr<store::CheckpointStore> store_;
  std::unique_ptr<journal::Journal> journal_;
  testing::FakeCriu criu_;
  testing::FakeGpu gpu_;
  metrics::Metrics metrics_;
  std::unique_ptr<Engine> engine_;
  Operation op_{"op-1", "checkpoint", "test"};
  pid_t init_ = 0, job_ = 0;
};

// A pod with hostUsers: false: its cryo-init is in a user namespace of its own, where its root
// holds every capability. Neither checkpointed (nothing stops) nor restored into (nothing
// starts): the refusal names hostUsers.
TEST_F(ContainerEngineTest, APodInAUserNamespaceOfItsOwnIsRefusedBothWays) {
  FakeProc::Process self;
  self.pid = ::getpid();
  self.userns = "user:[4026531837]";
  fake_.Add(self);
  CheckpointCt1();  // in the node's namespace (no link of its own): taken
  AddInit("", "", "user:[4026532999]");
  CheckpointRequest req;
  req.container_id = "c0ffee0000000000";
  req.checkpoint_id = "ct-2";
  auto r = engine_->Checkpoint(req, op_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("hostUsers: false"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("nothing was stopped"));
  EXPECT_FALSE(store_->Get("ct-2").ok());
  fake_.Remove(job_);
  AddInit("ct-1", "", "user:[4026532999]");
  RestoreRequest rr;
  rr.checkpoint_id = "ct-1";
  rr.container_id = "c0ffee0000000000";
  auto res = engine_->Restore(rr, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kFailedPrecondition) << res.status();
  EXPECT_THAT(std::string(res.status().message()), HasSubstr("user namespace of its own"));
  EXPECT_EQ(criu_.restores, 0);
}

// cryod's own guard of a checkpoint's namespace (the shim refuses first): a container of another
// namespace than the one the checkpoint was taken in is not restored into, whatever it names.
// Another node's cryod may ask for a job's members only (the Peer service): a container whose
// pod the shim recorded as that member of that job, in that namespace.
TEST_F(ContainerEngineTest, APeerMayNameOnlyTheJobsOwnMembers) {
  auto& c = rt_.containers["c0ffee0000000000"];
  c.labels["io.kubernetes.pod.namespace"] = "ml";
  EXPECT_EQ(engine_->CheckJobMember(c.id, "ml", "sum", "0").code(),
            absl::StatusCode::kPermissionDenied)
      << "a container of no job";
  c.annotations["cryo.dev/job"] = "sum";
  c.annotations["cryo.dev/job-member"] = "0";
  EXPECT_TRUE(engine_->CheckJobMember(c.id, "ml", "sum", "0").ok());
  absl::Status other = engine_->CheckJobMember(c.id, "ml", "sum", "1");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(other.message()), HasSubstr("member '0'"));
  EXPECT_EQ(engine_->CheckJobMember(c.id, "dev", "sum", "0").code(),
            absl::StatusCode::kPermissionDenied)
      << "another namespace's job of the same name";
  EXPECT_EQ(engine_->CheckJobMember(c.id, "ml", "other", "0").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(engine_->CheckJobMember("deadbeef", "ml", "sum", "0").code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ContainerEngineTest, ACheckpointIsRestoredOnlyIntoItsOwnNamespace) {
  rt_.containers["c0ffee0000000000"].labels["io.kubernetes.pod.namespace"] = "team-a";
  CheckpointAndEmpty();
  AddInit("ct-1");
  rt_.containers["c0ffee0000000000"].labels["io.kubernetes.pod.namespace"] = "team-b";
  RestoreRequest rr;
  rr.checkpoint_id = "ct-1";
  rr.container_id = "c0ffee0000000000";
  auto res = engine_->Restore(rr, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kPermissionDenied) << res.status();
  EXPECT_THAT(std::string(res.status().message()),
              HasSubstr("belongs to namespace team-a; container trainer is in namespace team-b"));
  EXPECT_EQ(criu_.restores, 0);
}

TEST_F(ContainerEngineTest, CheckpointSavesTheWritableLayerAndTheContainerSection) {
  CheckpointCt1();
  EXPECT_TRUE(criu_.last_dump.in_container.has_value()) << "CRIU runs inside the container";
  EXPECT_EQ(criu_.last_dump.in_container->init_pid, init_);
  EXPECT_FALSE(criu_.last_dump.leave_running)
      << "the job stays stopped until its files are saved too";
  auto m = store_->Get("ct-1");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->kind, store::CheckpointKind::kContainer);
  ASSERT_TRUE(m->container.has_value());
  EXPECT_EQ(m->container->image_ref, "sha256:abc");
  EXPECT_EQ(m->container->stdout_pipe, "pipe:[1001]");
  EXPECT_EQ(m->workload, "trainer") << "a container's workload defaults to its name";
  bool has_diff = false;
  for (const auto& f : m->files) {
    if (f.path != contract::checkpoint::kRootfsDiff) continue;
    has_diff = true;
    auto d = HashFile(dir_.path + "/store/checkpoints/ct-1/" + f.path);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->checksum, f.checksum);
  }
  EXPECT_TRUE(has_diff) << "the writable layer travels with the images";
  auto info = proc::ProcReader().Read(job_);
  ASSERT_TRUE(info.ok());
  EXPECT_NE(info->state, 'T') << "leave-running: the job was resumed after its files were saved";
}

TEST_F(ContainerEngineTest, RestoreIntoTheWrongContainerIsRefusedAndCryoInitHearsWhy) {
  // The new container: cryo-init waiting for another checkpoint, no job yet.
  CheckpointAndEmpty();
  AddInit("ct-other");
  // cryo-init is told with a real-time signal, whose default action ends the process: the
  // child ending is how the test sees it was told.
  RestoreRequest rr;
  rr.checkpoint_id = "ct-1";
  rr.container_id = "c0ffee0000000000";
  auto res = engine_->Restore(rr, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kFailedPrecondition) << res.status();
  EXPECT_NE(res.status().message().find("waits for checkpoint 'ct-other'"), std::string::npos)
      << res.status();
  EXPECT_EQ(criu_.restores, 0);
  int status = 0;
  EXPECT_TRUE(WaitUntil([&] { return ::waitpid(init_, &status, WNOHANG) == init_; }))
      << "cryo-init was not told";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == CRYO_INIT_SIGNAL);
  init_ = 0;
}

TEST_F(ContainerEngineTest, RestoreOntoAnotherImageIsRefusedBeforeAnythingStarts) {
  CheckpointAndEmpty();
  AddInit("ct-1");
  rt_.containers["c0ffee0000000000"].image_ref = "sha256:def";
  RestoreRequest rr;
  rr.checkpoint_id = "ct-1";
  rr.container_id = "c0ffee0000000000";
  auto res = engine_->Restore(rr, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kFailedPrecondition) << res.status();
  EXPECT_NE(res.status().message().find("resumes only on the image it ran on"), std::string::npos)
      << res.status();
  EXPECT_EQ(criu_.restores, 0);
  // A container checkpoint is not restored as a process either.
  rr.container_id.clear();
  EXPECT_EQ(engine_->Restore(rr, op_).status().code(), absl::StatusCode::kFailedPrecondition);
}

// The new container runs as uid 1000 with no capability and no_new_privs; the checkpoint's
// images (written by the fake CRIU with this test's own credentials: root, every capability)
// would restore the job as root: refused by name before CRIU runs, and cryo-init hears why.
TEST_F(ContainerEngineTest, RestoreGrantsNoMoreThanTheNewContainerDoes) {
  CheckpointAndEmpty();
  AddInit("ct-1",
          "Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t\n"
          "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
          "CapBnd:\t00000000a80425fb\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t0\n");
  RestoreRequest rr;
  rr.checkpoint_id = "ct-1";
  rr.container_id = "c0ffee0000000000";
  auto res = engine_->Restore(rr, op_);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kPermissionDenied) << res.status();
  EXPECT_NE(res.status().message().find("uid is 0"), std::string::npos) << res.status();
  EXPECT_NE(res.status().message().find("container trainer"), std::string::npos) << res.status();
  EXPECT_EQ(criu_.restores, 0);
  int status = 0;
  EXPECT_TRUE(WaitUntil([&] { return ::waitpid(init_, &status, WNOHANG) == init_; }))
      << "cryo-init was not told";
  init_ = 0;
}

TEST_F(ContainerEngineTest, RestoreOfAnHonestImageIntoAnEqualContainerReachesCriu) {
  CheckpointAndEmpty();
  AddInit("ct-1");  // the same credentials as the job had
  RestoreRequest rr;
  rr.checkpoint_id = "ct-1";
  rr.container_id = "c0ffee0000000000";
  (void)engine_->Restore(rr, op_);
  EXPECT_EQ(criu_.restores, 1);
}

}  // namespace
}  // namespace cryo::engine
