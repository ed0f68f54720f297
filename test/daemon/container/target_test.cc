// Resolving a CRI container to the processes cryod works on, through a fake runtime and a fake
// /proc: what is refused, and why it says so.

#include "daemon/container/target.h"

#include <thread>

#include "absl/time/clock.h"
#include "daemon/container/container_checkpoint.h"
#include "gtest/gtest.h"
#include "test/daemon/container/fake_container.h"
#include "test/daemon/test_util.h"

namespace cryo::container {
namespace {

using testing::FakeContainerRuntime;
using testing::FakeProc;

class TargetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    init_ = testing::SleepingChild();
    job_ = testing::SleepingChild();
    FakeProc::Process init;
    init.pid = init_;
    init.ns_pid = 1;
    init.comm = "cryo-init";
    init.exe = CRYO_INIT_CONTAINER_PATH;
    init.pidns = "pid:[777]";
    proc_fake_.Add(init);
    FakeProc::Process job;
    job.pid = job_;
    job.ppid = init_;
    job.ns_pid = 7;
    job.pidns = "pid:[777]";
    proc_fake_.Add(job);
    runtime::ContainerInfo c;
    c.id = "c0ffee0000000000";
    c.name = "trainer";
    c.state = runtime::ContainerInfo::State::kRunning;
    c.pid = init_;
    c.image = "example/train:1";
    c.image_ref = "sha256:abc";
    c.annotations = {{"cryo.dev/checkpoint-on-stop", "true"},
                     {"cryo.dev/workload-key", "ns.job.c"}};
    c.labels = {{"io.kubernetes.pod.namespace", "ns"},
                {"io.kubernetes.pod.name", "job-0"},
                {"io.kubernetes.pod.uid", "u1"},
                {"io.kubernetes.container.name", "trainer"},
                {"other", "x"}};
    rt_.containers[c.id] = c;
  }
  void TearDown() override {
    testing::Reap(init_);
    testing::Reap(job_);
  }

  TempDir dir_;
  FakeProc proc_fake_{dir_.path + "/proc"};
  proc::ProcReader proc_{dir_.path + "/proc"};
  FakeContainerRuntime rt_;
  pid_t init_ = 0, job_ = 0;
};

TEST_F(TargetTest, ACheckpointTargetIsTheOneJobUnderCryoInit) {
  auto t = ResolveContainer(rt_, proc_, "c0ffee0000000000", ContainerUse::kCheckpoint);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->init_pid, init_);
  EXPECT_EQ(t->job_pid, job_);
  EXPECT_EQ(t->stdout_pipe, "pipe:[1001]");
  EXPECT_EQ(t->info.name, "trainer");
  EXPECT_EQ(NsThreadIds(proc_, job_), std::vector<pid_t>{7}) << "thread ids as numbered inside";
  EXPECT_EQ(HostPidInNamespace(proc_, init_, 7), job_);
  EXPECT_EQ(NsPidsInUse(proc_, init_), (std::set<pid_t>{1, 7}));
}

TEST_F(TargetTest, RefusalsNameTheContainerAndSayWhy) {
  auto expect = [&](ContainerUse use, const std::string& want) {
    auto t = ResolveContainer(rt_, proc_, "c0ffee0000000000", use);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
    EXPECT_NE(t.status().message().find(want), std::string::npos) << t.status();
    EXPECT_NE(t.status().message().find("trainer"), std::string::npos) << t.status();
  };
  EXPECT_EQ(ResolveContainer(rt_, proc_, "nope", ContainerUse::kCheckpoint).status().code(),
            absl::StatusCode::kNotFound);
  // A restore wants a cryo-init told to wait and no job yet.
  expect(ContainerUse::kRestore, "not created to resume");
  // Two processes under cryo-init: one daemonized out of the job.
  pid_t second = testing::SleepingChild();
  FakeProc::Process p;
  p.pid = second;
  p.ppid = init_;
  proc_fake_.Add(p);
  expect(ContainerUse::kCheckpoint, "2 processes under cryo-init");
  proc_fake_.Remove(second);
  testing::Reap(second);
  // A terminal instead of the runtime's log pipes.
  FakeProc::Process init;
  init.pid = init_;
  init.exe = CRYO_INIT_CONTAINER_PATH;
  init.fd1 = "/dev/pts/0";
  proc_fake_.Remove(init_);
  proc_fake_.Add(init);
  expect(ContainerUse::kCheckpoint, "tty");
  // Not under cryo-init at all.
  init.exe = "/bin/sh";
  init.fd1 = "pipe:[1001]";
  proc_fake_.Remove(init_);
  proc_fake_.Add(init);
  expect(ContainerUse::kCheckpoint, "does not run under cryo-init");
  // Exited.
  rt_.containers["c0ffee0000000000"].state = runtime::ContainerInfo::State::kExited;
  rt_.containers["c0ffee0000000000"].exit_code = 3;
  expect(ContainerUse::kCheckpoint, "exit code 3");
}

TEST_F(TargetTest, ARestoreTargetWaitsWithNoJob) {
  proc_fake_.Remove(job_);
  FakeProc::Process init;
  init.pid = init_;
  init.exe = CRYO_INIT_CONTAINER_PATH;
  init.env = {"PATH=/bin", CRYO_INIT_RESTORE_ENV "=train-1"};
  proc_fake_.Remove(init_);
  proc_fake_.Add(init);
  auto t = ResolveContainer(rt_, proc_, "c0ffee0000000000", ContainerUse::kRestore);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->restore_from, "train-1");
  EXPECT_EQ(t->job_pid, 0);
}

// Found on CI: the restore asked for right after the start found PID 1 still runc's init (its
// exe '/', not yet exec'd into cryo-init). It is given a moment to become cryo-init; one that
// never does is refused.
TEST_F(TargetTest, ARestoreTargetJustStartedIsGivenTimeToBecomeCryoInit) {
  proc_fake_.Remove(job_);
  FakeProc::Process init;
  init.pid = init_;
  init.exe = "/";
  init.comm = "runc:[2:INIT]";
  init.cmdline = {"runc", "init"};
  proc_fake_.Remove(init_);
  proc_fake_.Add(init);
  std::thread exec([&] {
    absl::SleepFor(absl::Milliseconds(150));
    FakeProc::Process now = init;
    now.exe = CRYO_INIT_CONTAINER_PATH;
    now.comm = "init";
    now.cmdline = {CRYO_INIT_CONTAINER_PATH, "sh"};
    now.env = {CRYO_INIT_RESTORE_ENV "=train-1"};
    proc_fake_.Add(now);  // in one step, as exec does
  });
  auto t = ResolveContainer(rt_, proc_, "c0ffee0000000000", ContainerUse::kRestore);
  exec.join();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->restore_from, "train-1");

  proc_fake_.Remove(init_);
  proc_fake_.Add(init);
  t = ResolveContainer(rt_, proc_, "c0ffee0000000000", ContainerUse::kRestore,
                       absl::Milliseconds(100));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_NE(t.status().message().find("does not run under cryo-init"), std::string::npos)
      << t.status();
}

// Found on CI (2026-11-29): in the middle of the exec PID 1's exe was already cryo-init's while
// its environment was still empty, and the restore was refused as "not created to resume". It
// is given the same moment to finish the exec.
TEST_F(TargetTest, ARestoreTargetInTheMiddleOfItsExecIsGivenTimeForItsEnvironment) {
  proc_fake_.Remove(job_);
  FakeProc::Process init;
  init.pid = init_;
  init.exe = CRYO_INIT_CONTAINER_PATH;
  init.comm = "init";
  init.cmdline = {CRYO_INIT_CONTAINER_PATH, "sh"};
  init.env = {};
  proc_fake_.Add(init);
  std::thread exec([&] {
    absl::SleepFor(absl::Milliseconds(150));
    FakeProc::Process now = init;
    now.env = {"PATH=/bin", CRYO_INIT_RESTORE_ENV "=train-1"};
    proc_fake_.Add(now);
  });
  auto t = ResolveContainer(rt_, proc_, "c0ffee0000000000", ContainerUse::kRestore);
  exec.join();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->restore_from, "train-1");
}

TEST_F(TargetTest, OptedInContainersCarryTheirKeyIdentityAndReason) {
  runtime::ContainerInfo other = rt_.containers["c0ffee0000000000"];
  other.id = "0ther";
  other.annotations.clear();
  rt_.containers[other.id] = other;
  auto opted = OptedInContainers(rt_, "cryo.dev", "termination-notice");
  ASSERT_TRUE(opted.ok()) << opted.status();
  ASSERT_EQ(opted->size(), 1u) << "only the opted-in container";
  EXPECT_EQ((*opted)[0].container_id, "c0ffee0000000000");
  EXPECT_EQ((*opted)[0].workload, "ns.job.c");
  EXPECT_EQ((*opted)[0].labels.at("cryo.dev/reason"), "termination-notice");
  EXPECT_EQ((*opted)[0].labels.at("io.kubernetes.pod.uid"), "u1");
  EXPECT_EQ((*opted)[0].labels.count("other"), 0u);
  EXPECT_TRUE((*opted)[0].checkpoint_on_stop);
  EXPECT_FALSE((*opted)[0].every.has_value()) << "the pod did not ask for periodic checkpoints";
  // A managed container whose pod set checkpoint-every (the shim wrote it in seconds) has a
  // period, with or without checkpoint-on-stop.
  runtime::ContainerInfo periodic = rt_.containers["c0ffee0000000000"];
  periodic.id = "peri0dic";
  periodic.annotations.erase("cryo.dev/checkpoint-on-stop");
  periodic.annotations["cryo.dev/managed"] = "true";
  periodic.annotations["cryo.dev/checkpoint-every"] = "1200";
  periodic.annotations["io.kubernetes.pod.terminationGracePeriod"] = "45";
  rt_.containers[periodic.id] = periodic;
  opted = OptedInContainers(rt_, "cryo.dev", "periodic");
  ASSERT_TRUE(opted.ok()) << opted.status();
  ASSERT_EQ(opted->size(), 2u);
  const OptedIn& p = (*opted)[0].container_id == "peri0dic" ? (*opted)[0] : (*opted)[1];
  EXPECT_FALSE(p.checkpoint_on_stop);
  ASSERT_TRUE(p.every.has_value());
  EXPECT_EQ(*p.every, absl::Minutes(20));
  EXPECT_EQ(p.grace_s, 45);
  rt_.list_error = absl::UnavailableError("runtime down");
  EXPECT_EQ(OptedInContainers(rt_, "cryo.dev", "x").status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace cryo::container
