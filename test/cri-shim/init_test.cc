// cryo-init as PID 1 would behave: real child processes, real signals.
#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#ifndef CRYO_INIT_BINARY
#error "CRYO_INIT_BINARY must name the cryo-init binary"
#endif

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

bool WaitUntil(const std::function<bool()>& pred, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (!pred()) {
    if (absl::Now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

class Init {
 public:
  // own_pid_namespace: cryo-init runs as PID 1 of a new pid namespace (through unshare), as in
  // a container; needs root.
  Init(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
       bool own_pid_namespace = false) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv;
      if (own_pid_namespace) {
        for (const char* a : {"unshare", "--pid", "--fork", "--kill-child"}) {
          argv.push_back(const_cast<char*>(a));
        }
      }
      argv.push_back(const_cast<char*>(CRYO_INIT_BINARY));
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      _exit(99);
    }
    close(out[1]);
    close(err[1]);
    out_ = fdopen(out[0], "r");
    err_fd_ = err[0];
  }

  ~Init() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ != nullptr) fclose(out_);
    if (err_fd_ >= 0) close(err_fd_);
  }

  pid_t pid() const { return pid_; }

  // With own_pid_namespace: the host pid of cryo-init (unshare's child); 0 until it runs.
  pid_t InitPid() {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) +
                    "/children");
    pid_t child = 0;
    f >> child;
    return child;
  }

  // Next stdout line without the newline; empty at EOF.
  std::string ReadLine() {
    char buf[256];
    if (out_ == nullptr || fgets(buf, sizeof(buf), out_) == nullptr) return "";
    return std::string(absl::StripSuffix(buf, "\n"));
  }

  std::string Stderr() {
    std::string s;
    char buf[256];
    ssize_t n;
    while ((n = read(err_fd_, buf, sizeof(buf))) > 0) s.append(buf, n);
    return s;
  }

  // Exit code as a shell reports it; -1 if it did not exit within the timeout.
  int Wait(absl::Duration timeout = absl::Seconds(20)) {
    int status = 0;
    bool done = WaitUntil(
        [&] {
          pid_t r = waitpid(pid_, &status, WNOHANG);
          return r == pid_;
        },
        timeout);
    if (!done) return -1;
    reaped_ = true;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 1000 + WTERMSIG(status);  // cryo-init itself died of a signal
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  FILE* out_ = nullptr;
  int err_fd_ = -1;
};

// pid -> (ppid, state) of every process.
struct ProcInfo {
  pid_t ppid;
  char state;
};
std::vector<std::pair<pid_t, ProcInfo>> Processes() {
  std::vector<std::pair<pid_t, ProcInfo>> out;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    int pid;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    if (fields.size() < 2) continue;
    int ppid = 0;
    (void)absl::SimpleAtoi(fields[1], &ppid);
    out.push_back({pid, {ppid, fields[0][0]}});
  }
  closedir(d);
  return out;
}

std::set<pid_t> ChildrenOf(pid_t parent) {
  std::set<pid_t> kids;
  for (const auto& [pid, info] : Processes()) {
    if (info.ppid == parent) kids.insert(pid);
  }
  return kids;
}

TEST(CryoInitTest, ExitsWithTheJobsExitCode) {
  Init init({"sh", "-c", "exit 3"});
  EXPECT_EQ(init.Wait(), 3);
}

TEST(CryoInitTest, JobKilledBySignalGives128PlusSignal) {
  Init init({"sh", "-c", "kill -KILL $$"});
  EXPECT_EQ(init.Wait(), 128 + SIGKILL);
}

TEST(CryoInitTest, ForwardsSignalsToTheJob) {
  Init init({"--", "sh", "-c",
             "trap 'echo got-usr1' USR1; trap 'exit 42' TERM; echo ready; "
             "while :; do sleep 0.05; done"});
  ASSERT_EQ(init.ReadLine(), "ready");
  kill(init.pid(), SIGUSR1);
  EXPECT_EQ(init.ReadLine(), "got-usr1");
  kill(init.pid(), SIGTERM);
  EXPECT_EQ(init.Wait(), 42);
}

TEST(CryoInitTest, StartsTheJobInASessionOfItsOwn) {
  Init init({"sh", "-c", "echo $$; cut -d' ' -f6 /proc/$$/stat"});
  std::string pid = init.ReadLine();
  std::string sid = init.ReadLine();
  EXPECT_FALSE(pid.empty());
  EXPECT_EQ(sid, pid) << "the job is not a session leader";
  EXPECT_NE(sid, std::to_string(getsid(0)));
  EXPECT_EQ(init.Wait(), 0);
}

TEST(CryoInitTest, ReapsOrphansWhileTheJobRuns) {
  // The subshell exits at once; its sleep is orphaned to cryo-init, ends and must be reaped.
  Init init({"sh", "-c", "(sleep 0.01 &); echo $$; exec sleep 30"});
  pid_t job = 0;
  ASSERT_TRUE(absl::SimpleAtoi(init.ReadLine(), &job));
  EXPECT_TRUE(
      WaitUntil([&] { return ChildrenOf(init.pid()) == std::set<pid_t>{job}; }, absl::Seconds(20)))
      << "cryo-init has children other than the job (unreaped orphans?)";
  kill(init.pid(), SIGTERM);
  EXPECT_EQ(init.Wait(), 128 + SIGTERM);
}

TEST(CryoInitTest, TheFastPathLibraryGoesFirstInTheJobsPreload) {
  // The loader warns about preload paths that do not exist and goes on: only the variables
  // matter here.
  Init init({"sh", "-c", "echo \"$LD_PRELOAD\"; echo \"${CRYO_INIT_PRELOAD:-gone}\""},
            {"CRYO_INIT_PRELOAD=/.cryo/libcryo_gpu_fastpath.so", "LD_PRELOAD=/opt/jemalloc.so"});
  EXPECT_EQ(init.ReadLine(), "/.cryo/libcryo_gpu_fastpath.so:/opt/jemalloc.so");
  EXPECT_EQ(init.ReadLine(), "gone") << "the shim's variable is not the job's";
  EXPECT_EQ(init.Wait(), 0);
}

TEST(CryoInitTest, WithoutTheFastPathThePreloadIsTheImages) {
  Init init({"sh", "-c", "echo \"${LD_PRELOAD:-none}\""});
  EXPECT_EQ(init.ReadLine(), "none");
  EXPECT_EQ(init.Wait(), 0);
}

TEST(CryoInitTest, MissingCommandIs127) {
  Init init({"/no/such/command"});
  EXPECT_EQ(init.Wait(), 127);
  EXPECT_THAT(init.Stderr(), HasSubstr("cannot run /no/such/command"));
}

TEST(CryoInitTest, NoCommandIsUsageError) {
  Init init({});
  EXPECT_EQ(init.Wait(), 125);
  EXPECT_THAT(init.Stderr(), HasSubstr("usage: cryo-init"));
}

// cryod's side of the restore protocol: queue CRYO_INIT_SIGNAL with a value.
bool TellInit(pid_t init, int value) {
  union sigval v;
  v.sival_int = value;
  return sigqueue(init, 40, v) == 0;  // CRYO_INIT_SIGNAL
}

// Starts `script` in the pid namespace of `init` the way a restore leaves a job: a child of a
// process that then exits, so the kernel reparents it to the namespace's PID 1. Returns its pid
// inside the namespace.
pid_t AdoptIntoNamespace(pid_t init, const std::string& script) {
  std::string cmd = "nsenter --target " + std::to_string(init) + " --pid -- sh -c '(" + script +
                    ") >/dev/null 2>&1 & echo $!'";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return 0;
  int pid = 0;
  if (fscanf(p, "%d", &pid) != 1) pid = 0;
  pclose(p);
  return pid;
}

// Whether pid waits for signals yet (its mask is set then): one queued earlier would kill it.
// /proc/<pid>/status cannot tell, the kernel unblocks the waited set during the wait.
bool BlocksSignals(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/wchan");
  std::string wchan;
  f >> wchan;
  return wchan.find("sigtimedwait") != std::string::npos;
}

class CryoInitRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "restore-mode tests run cryo-init as PID 1 of a new pid namespace, which "
                      "needs root; run ctest as root";
    }
  }
};

TEST_F(CryoInitRestoreTest, StartsNothingAndExitsWhenTheRestoreFailed) {
  Init init({"sh", "-c", "echo should-not-run"}, {"CRYO_INIT_RESTORE_FROM=ckpt-1"}, true);
  ASSERT_TRUE(WaitUntil([&] { return init.InitPid() > 0; }, absl::Seconds(10)));
  pid_t pid1 = init.InitPid();
  ASSERT_TRUE(WaitUntil([&] { return BlocksSignals(pid1); }, absl::Seconds(10)));
  ASSERT_TRUE(TellInit(pid1, 0));
  EXPECT_EQ(init.Wait(), 125);
  EXPECT_EQ(init.ReadLine(), "") << "the command of a resuming container must not run";
  std::string err = init.Stderr();
  // Quiet while it waits (a resumed pod's log carries no line of cryo's own), but a failure is
  // said.
  EXPECT_THAT(err, Not(HasSubstr("waiting for the restore")));
  EXPECT_THAT(err, HasSubstr("the restore of checkpoint ckpt-1 failed"));
}

TEST_F(CryoInitRestoreTest, SaysWhatItWaitsForWhenVerbose) {
  Init init({"true"}, {"CRYO_INIT_RESTORE_FROM=ckpt-1", "CRYO_INIT_VERBOSE=1"}, true);
  ASSERT_TRUE(WaitUntil([&] { return init.InitPid() > 0; }, absl::Seconds(10)));
  pid_t pid1 = init.InitPid();
  ASSERT_TRUE(WaitUntil([&] { return BlocksSignals(pid1); }, absl::Seconds(10)));
  ASSERT_TRUE(TellInit(pid1, 0));
  EXPECT_EQ(init.Wait(), 125);
  EXPECT_THAT(init.Stderr(), HasSubstr("waiting for the restore of checkpoint ckpt-1"));
}

TEST_F(CryoInitRestoreTest, SupervisesTheRestoredJobAndExitsWithItsCode) {
  Init init({"sh", "-c", "echo should-not-run"}, {"CRYO_INIT_RESTORE_FROM=ckpt-2"}, true);
  ASSERT_TRUE(WaitUntil([&] { return init.InitPid() > 0; }, absl::Seconds(10)));
  pid_t pid1 = init.InitPid();
  // A helper that exits on its own (as a failed CRIU helper might) must not count as the job.
  pid_t helper = AdoptIntoNamespace(pid1, "exit 9");
  ASSERT_GT(helper, 1);
  pid_t job = AdoptIntoNamespace(pid1, "sleep 1; exit 42");
  ASSERT_GT(job, 1);
  ASSERT_TRUE(WaitUntil([&] { return BlocksSignals(pid1); }, absl::Seconds(10)));
  ASSERT_TRUE(TellInit(pid1, job));
  EXPECT_EQ(init.Wait(), 42) << init.Stderr();
  EXPECT_EQ(init.ReadLine(), "");
  EXPECT_EQ(init.Stderr(), "") << "a resumed job's log goes on without a line of cryo's own";
}

TEST_F(CryoInitRestoreTest, JobThatEndedBeforeTheNewsStillGivesItsCode) {
  Init init({"true"}, {"CRYO_INIT_RESTORE_FROM=ckpt-3"}, true);
  ASSERT_TRUE(WaitUntil([&] { return init.InitPid() > 0; }, absl::Seconds(10)));
  pid_t pid1 = init.InitPid();
  // News queued before cryo-init blocks its signal would be dropped (a namespace's init ignores
  // signals it has no handler for), and it would wait for the restore until its timeout.
  ASSERT_TRUE(WaitUntil([&] { return BlocksSignals(pid1); }, absl::Seconds(10)));
  // The job lives long enough to become cryo-init's child (a job that ended at once could be
  // reaped by the shell that started it, never reaching cryo-init), then ends unannounced.
  pid_t job = AdoptIntoNamespace(pid1, "sleep 2; exit 7");
  ASSERT_GT(job, 1);
  auto children = [&] {
    std::ifstream f("/proc/" + std::to_string(pid1) + "/task/" + std::to_string(pid1) +
                    "/children");
    std::string c;
    f >> c;
    return c;
  };
  ASSERT_TRUE(WaitUntil([&] { return !children().empty(); }, absl::Seconds(10)));
  // Wait until cryo-init has reaped it (no zombie left), then tell.
  ASSERT_TRUE(WaitUntil([&] { return children().empty(); }, absl::Seconds(10)));
  ASSERT_TRUE(TellInit(pid1, job));
  EXPECT_EQ(init.Wait(), 7) << init.Stderr();
}

TEST_F(CryoInitRestoreTest, GivesUpWhenNoRestoreComes) {
  Init init({"true"}, {"CRYO_INIT_RESTORE_FROM=ckpt-4", "CRYO_INIT_RESTORE_TIMEOUT_S=1"}, true);
  EXPECT_EQ(init.Wait(), 125);
  EXPECT_THAT(init.Stderr(), HasSubstr("no restore of checkpoint ckpt-4 came within 1 s"));
}

TEST_F(CryoInitRestoreTest, StopBeforeTheRestoreEndsItAtOnce) {
  Init init({"true"}, {"CRYO_INIT_RESTORE_FROM=ckpt-5"}, true);
  ASSERT_TRUE(WaitUntil([&] { return init.InitPid() > 0; }, absl::Seconds(10)));
  pid_t pid1 = init.InitPid();
  ASSERT_TRUE(WaitUntil([&] { return BlocksSignals(pid1); }, absl::Seconds(10)));
  ASSERT_EQ(kill(pid1, SIGTERM), 0);
  EXPECT_EQ(init.Wait(), 128 + SIGTERM);
}

TEST(CryoInitTest, IsStaticallyLinked) {
  std::ifstream f(CRYO_INIT_BINARY, std::ios::binary);
  Elf64_Ehdr eh;
  ASSERT_TRUE(f.read(reinterpret_cast<char*>(&eh), sizeof(eh)));
  ASSERT_EQ(memcmp(eh.e_ident, ELFMAG, SELFMAG), 0);
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    f.seekg(eh.e_phoff + i * eh.e_phentsize);
    ASSERT_TRUE(f.read(reinterpret_cast<char*>(&ph), sizeof(ph)));
    EXPECT_NE(ph.p_type, static_cast<Elf64_Word>(PT_INTERP)) << "cryo-init needs a dynamic loader";
    EXPECT_NE(ph.p_type, static_cast<Elf64_Word>(PT_DYNAMIC)) << "cryo-init is dynamically linked";
  }
}

// cryod's word that it checkpointed the job before ending it.
constexpr int kCheckpointedWord = 0x43525930;    // CRYO_INIT_VALUE_CHECKPOINTED
constexpr int kResumesEarlierWord = 0x44000000;  // CRYO_INIT_VALUE_RESUMES_EARLIER

char StateOf(pid_t pid) {
  for (const auto& [p, info] : Processes()) {
    if (p == pid) return info.state;
  }
  return 0;
}

class CheckpointedStopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cryo-init-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    term_log_ = dir_ + "/termination-log";
    std::ofstream(term_log_).close();
  }
  void TearDown() override {
    unlink(term_log_.c_str());
    rmdir(dir_.c_str());
  }
  std::string TerminationMessage() {
    std::ifstream f(term_log_);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  std::string dir_;
  std::string term_log_;
};

TEST_F(CheckpointedStopTest, AJobEndedAfterItsCheckpointExitsWithTheCheckpointedCode) {
  std::string log_env = "CRYO_INIT_TERMINATION_LOG=" + term_log_;
  Init init({"sh", "-c", "echo $$; exec sleep 30"}, {log_env});
  pid_t job = 0;
  ASSERT_TRUE(absl::SimpleAtoi(init.ReadLine(), &job));
  ASSERT_TRUE(TellInit(init.pid(), kCheckpointedWord));
  // The word is taken before the job ends (as cryod sends it), then the job is killed.
  ASSERT_TRUE(WaitUntil([&] { return BlocksSignals(init.pid()); }, absl::Seconds(10)));
  kill(job, SIGKILL);
  EXPECT_EQ(init.Wait(), 75) << "not 137: Kubernetes must tell a checkpointed stop from a failure";
  EXPECT_THAT(TerminationMessage(), HasSubstr("checkpointed"));
}

TEST_F(CheckpointedStopTest, TheWordCountsWhenTheJobsEndIsSeenFirst) {
  // cryod queues the word, then kills the job; if cryo-init wakes only after both, the kernel
  // hands it SIGCHLD (17) before the real-time word (40).
  Init init({"sh", "-c", "echo $$; exec sleep 30"}, {"CRYO_INIT_CHECKPOINTED_EXIT_CODE=99"});
  pid_t job = 0;
  ASSERT_TRUE(absl::SimpleAtoi(init.ReadLine(), &job));
  ASSERT_EQ(kill(init.pid(), SIGSTOP), 0);
  ASSERT_TRUE(WaitUntil([&] { return StateOf(init.pid()) == 'T'; }, absl::Seconds(10)));
  ASSERT_TRUE(TellInit(init.pid(), kCheckpointedWord));
  kill(job, SIGKILL);
  ASSERT_TRUE(WaitUntil([&] { return StateOf(job) == 'Z'; }, absl::Seconds(10)));
  ASSERT_EQ(kill(init.pid(), SIGCONT), 0);
  EXPECT_EQ(init.Wait(), 99);
}

// The plan at a stop took no checkpoint (it would not have fit the grace period): the job ends
// with the checkpointed exit code, and the message says the replacement resumes from an earlier
// checkpoint and how much work that loses.
TEST_F(CheckpointedStopTest, AStopThatResumesFromAnEarlierCheckpointSaysHowMuchWorkIsLost) {
  std::string log_env = "CRYO_INIT_TERMINATION_LOG=" + term_log_;
  Init init({"sh", "-c", "echo $$; exec sleep 30"}, {log_env});
  pid_t job = 0;
  ASSERT_TRUE(absl::SimpleAtoi(init.ReadLine(), &job));
  ASSERT_TRUE(WaitUntil([&] { return BlocksSignals(init.pid()); }, absl::Seconds(10)));
  ASSERT_TRUE(TellInit(init.pid(), kResumesEarlierWord + 754));
  kill(job, SIGKILL);
  EXPECT_EQ(init.Wait(), 75);
  EXPECT_THAT(TerminationMessage(), HasSubstr("not checkpointed at this stop"));
  EXPECT_THAT(TerminationMessage(), HasSubstr("taken 754 s before the stop"));
}

TEST_F(CheckpointedStopTest, OtherWordsAreNotTheCheckpointedOne) {
  Init init({"sh", "-c", "echo $$; exec sleep 30"});
  pid_t job = 0;
  ASSERT_TRUE(absl::SimpleAtoi(init.ReadLine(), &job));
  ASSERT_TRUE(WaitUntil([&] { return BlocksSignals(init.pid()); }, absl::Seconds(10)));
  ASSERT_TRUE(TellInit(init.pid(), 12345));  // forwarded to the job, which does not handle it
  EXPECT_EQ(init.Wait(), 128 + 40);
  (void)job;
}

TEST(CryoInitTest, AnOutOfRangeCheckpointedCodeFallsBackToTheDefault) {
  Init init({"sh", "-c", "echo $$; exec sleep 30"}, {"CRYO_INIT_CHECKPOINTED_EXIT_CODE=125"});
  pid_t job = 0;
  ASSERT_TRUE(absl::SimpleAtoi(init.ReadLine(), &job));
  ASSERT_TRUE(WaitUntil([&] { return BlocksSignals(init.pid()); }, absl::Seconds(10)));
  ASSERT_TRUE(TellInit(init.pid(), kCheckpointedWord));
  kill(job, SIGKILL);
  EXPECT_EQ(init.Wait(), 75) << "125 is cryo-init's own failure code";
}

}  // namespace
