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
  Init(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv = {const_cast<char*>(CRYO_INIT_BINARY)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
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

TEST(CryoInitTest, RestoreModeSaysItIsNotImplementedYet) {
  Init init({"sh", "-c", "echo should-not-run"}, {"CRYO_INIT_RESTORE_FROM=ckpt-1"});
  EXPECT_EQ(init.Wait(), 125);
  EXPECT_EQ(init.ReadLine(), "");
  EXPECT_THAT(init.Stderr(), HasSubstr("restore mode is not implemented yet"));
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

}  // namespace
