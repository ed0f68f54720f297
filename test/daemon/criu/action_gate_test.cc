#include "daemon/criu/action_gate.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "test/temp_dir.h"

namespace cryo::criu {
namespace {

// The gate as CRIU runs it: a child process with CRIU's action and the gate's words in its
// environment. Its exit status.
int RunGate(const std::string& action, const std::vector<std::string>& env) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("CRTOOLS_SCRIPT_ACTION", action.c_str(), 1);
    for (const std::string& e : env) {
      const auto eq = e.find('=');
      ::setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
    ::_exit(WaitAtGate(/*poll_ms=*/20));
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(ActionGateTest, CriuIsLetOnOnlyByTheVerdictOk) {
  TempDir dir;
  auto gate = ActionGate::Open(dir / "gate", "/usr/libexec/cryo-nsexec");
  ASSERT_TRUE(gate.ok()) << gate.status();
  struct stat st;
  ASSERT_EQ(::stat((dir / "gate").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ((*gate)->Args(),
            (std::vector<std::string>{"--action-script", "/usr/libexec/cryo-nsexec"}));
  ASSERT_TRUE((*gate)->Tell(true).ok());
  EXPECT_EQ(RunGate("post-restore", (*gate)->Env()), 0);

  auto refused = ActionGate::Open(dir / "gate2", "/x");
  ASSERT_TRUE(refused.ok()) << refused.status();
  ASSERT_TRUE((*refused)->Tell(false).ok());
  EXPECT_EQ(RunGate("post-restore", (*refused)->Env()), 1);
}

TEST(ActionGateTest, TheGateWaitsForAVerdictThatComesLater) {
  TempDir dir;
  auto gate = ActionGate::Open(dir / "gate", "/x");
  ASSERT_TRUE(gate.ok()) << gate.status();
  std::thread later([&] {
    ::usleep(150 * 1000);  // several of the gate's polls go by first
    EXPECT_TRUE((*gate)->Tell(true).ok());
  });
  EXPECT_EQ(RunGate("post-restore", (*gate)->Env()), 0);
  later.join();
}

TEST(ActionGateTest, AGateWithdrawnWithoutAVerdictFails) {
  TempDir dir;
  auto gate = ActionGate::Open(dir / "gate", "/x");
  ASSERT_TRUE(gate.ok()) << gate.status();
  std::thread later([&] {
    ::usleep(100 * 1000);  // the gate is waiting by then
    (*gate)->Withdraw();
  });
  EXPECT_EQ(RunGate("post-restore", (*gate)->Env()), 1);
  later.join();
}

TEST(ActionGateTest, OtherActionsPassAndAGateWithoutVerdictOrOwnerFails) {
  TempDir dir;
  auto gate = ActionGate::Open(dir / "gate", "/x");
  ASSERT_TRUE(gate.ok()) << gate.status();
  // CRIU runs every script at every action; only post-restore waits.
  EXPECT_EQ(RunGate("pre-restore", {}), 0);
  EXPECT_EQ(RunGate("pre-resume", {}), 0);
  // Not told where the gate is: fails closed.
  EXPECT_EQ(RunGate("post-restore", {}), 1);

  // cryod gone before its verdict: a pid that has exited and been reaped.
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  std::vector<std::string> env = (*gate)->Env();
  env[1] = absl::StrCat(kGateOwnerEnv, "=", gone);
  EXPECT_EQ(RunGate("post-restore", env), 1);

  // Once closed and removed, there is no gate to open.
  gate->reset();
  EXPECT_NE(::access((dir / "gate").c_str(), F_OK), 0);
  EXPECT_EQ(RunGate("post-restore", env), 1);
}

TEST(ActionGateTest, TheDumpGateSaysItHasArrivedAndWaitsForCryodsWork) {
  TempDir dir;
  auto gate = ActionGate::Open(dir / "gate", "/x", kDumpAction);
  ASSERT_TRUE(gate.ok()) << gate.status();
  EXPECT_FALSE((*gate)->WaitArrival(absl::Milliseconds(10)));
  // Not this gate's action: passes, and does not say it arrived.
  EXPECT_EQ(RunGate("post-restore", (*gate)->Env()), 0);
  EXPECT_FALSE((*gate)->WaitArrival(absl::Milliseconds(10)));

  bool arrived = false;
  std::thread cryod([&] {
    // The work is done only once the script is there (the tasks frozen), then CRIU goes on.
    arrived = (*gate)->WaitArrival(absl::Seconds(30));
    EXPECT_TRUE((*gate)->Tell(arrived).ok());
  });
  EXPECT_EQ(RunGate("post-dump", (*gate)->Env()), 0);
  cryod.join();
  EXPECT_TRUE(arrived);

  auto refused = ActionGate::Open(dir / "gate2", "/x", kDumpAction);
  ASSERT_TRUE(refused.ok()) << refused.status();
  std::thread fails([&] {
    EXPECT_TRUE((*refused)->WaitArrival(absl::Seconds(30)));
    EXPECT_TRUE((*refused)->Tell(false).ok());
  });
  EXPECT_EQ(RunGate("post-dump", (*refused)->Env()), 1);
  fails.join();
}

}  // namespace
}  // namespace cryo::criu
