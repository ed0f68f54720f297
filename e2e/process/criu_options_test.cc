// cryo's CRIU options with real CRIU, through cryod and the cryo CLI: for each kind of process
// state CRIU keeps only when asked, a checkpoint without the option is refused (FAILED_PRECONDITION
// naming cryo's flag, config key and annotation; the job runs on), and with it the job is
// checkpointed, restored, and its state is what it was.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "e2e/process/harness.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace cryo::e2e {
namespace {

class CriuOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (CRIU)";
    dir_ = MakeTempDir("cryo-criu-opts");
    ASSERT_FALSE(dir_.empty());
    auto c = Cryod::Start(dir_, dir_ + "/store", "node-a");
    ASSERT_TRUE(c.ok()) << c.status();
    cryod_ = std::move(*c);
  }
  void TearDown() override {
    job_.reset();
    if (cryod_) {
      const std::string why = cryod_->StopCleanly();
      EXPECT_TRUE(why.empty()) << why;
    }
    cryod_.reset();
    if (!dir_.empty() && !HasFailure()) std::filesystem::remove_all(dir_);
  }

  void StartJob(std::vector<std::string> args) {
    auto w = Workload::StartProgram(dir_, EDGELOAD_BIN, std::move(args));
    ASSERT_TRUE(w.ok()) << w.status();
    job_ = std::move(*w);
  }

  // `cryo -o json checkpoint PID --id ID <flags>`: the CLI's exit code and JSON answer.
  std::pair<int, nlohmann::json> Checkpoint(const std::string& id,
                                            std::vector<std::string> flags = {}) {
    std::vector<std::string> args = {"-o",   "json", "checkpoint", std::to_string(job_->pid()),
                                     "--id", id};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = RunCli(cryod_->socket(), args);
    return {r.code, nlohmann::json::parse(r.out, nullptr, false)};
  }

  // The refusal names cryo's option three ways, and the job was left running.
  void ExpectRefusedNaming(const std::pair<int, nlohmann::json>& r, const std::string& option) {
    EXPECT_NE(r.first, 0);
    ASSERT_TRUE(r.second.is_object()) << r.second;
    const auto& err = r.second["error"];
    EXPECT_EQ(err.value("code", ""), "FAILED_PRECONDITION") << err;
    const std::string msg = err.value("message", "");
    EXPECT_TRUE(absl::StrContains(msg, "cryo checkpoint --" + option)) << msg;
    EXPECT_TRUE(absl::StrContains(msg, "cryo.dev/criu-" + option)) << msg;
    std::string key = option;
    for (char& c : key) c = c == '-' ? '_' : c;
    EXPECT_TRUE(absl::StrContains(msg, "criu_" + key)) << msg;
    const uint64_t now = job_->Status().value("main", uint64_t{0});
    EXPECT_TRUE(job_->WaitMain(now + 5, absl::Seconds(10))) << "the job does not run on";
  }

  // Checkpoint (which stops the job), restore it, and wait for it to go on.
  void CheckpointAndRestore(const std::string& id, std::vector<std::string> flags = {}) {
    auto r = Checkpoint(id, flags);
    ASSERT_EQ(r.first, 0) << r.second;
    ASSERT_TRUE(WaitFor([&] {
      job_->Reap();
      return job_->State() == '-';
    }));
    const uint64_t before = job_->Status().value("main", uint64_t{0});
    auto rr = RunCli(cryod_->socket(), {"restore", id});
    ASSERT_EQ(rr.code, 0) << rr.out;
    EXPECT_TRUE(job_->WaitMain(before + 20, absl::Seconds(20))) << "the restored job is stuck";
  }

  std::string dir_;
  std::unique_ptr<Cryod> cryod_;
  std::unique_ptr<Workload> job_;
};

TEST_F(CriuOptionsTest, ADeletedFileAboveTheGhostLimitNeedsALargerLimit) {
  StartJob({"--deleted-mib", "8"});
  ExpectRefusedNaming(Checkpoint("ghost-1", {"--ghost-limit", "1Mi"}), "ghost-limit");
  // The node's default (64Mi) carries it; its contents are checked every tick after restore.
  CheckpointAndRestore("ghost-2");
  EXPECT_EQ(job_->Status().value("ok", 0), 1) << job_->Status();
  auto inspect = RunCli(cryod_->socket(), {"-o", "json", "inspect", "ghost-2"});
  auto m = nlohmann::json::parse(inspect.out, nullptr, false);
  EXPECT_EQ(m["options"]["ghost_limit"], 64ull << 20) << inspect.out;
}

// CRIU cannot dump an io_uring (PyTorch's TCPStore holds one through libuv; torchrun's agent
// did on two H200s). Refused while the job runs, before anything is frozen, naming the process;
// the job runs on and the store holds nothing.
TEST_F(CriuOptionsTest, AnIoUringIsRefusedBeforeAnythingStops) {
  std::string why;
  if (!KernelGivesIoUring(&why)) GTEST_SKIP() << "this kernel refuses io_uring_setup: " << why;
  StartJob({"--io-uring"});
  ASSERT_TRUE(job_->WaitMain(3)) << "the job did not start";
  auto r = Checkpoint("uring");
  EXPECT_NE(r.first, 0);
  ASSERT_TRUE(r.second.is_object()) << r.second;
  EXPECT_EQ(r.second["error"].value("code", ""), "FAILED_PRECONDITION") << r.second;
  const std::string msg = r.second["error"].value("message", "");
  EXPECT_TRUE(absl::StrContains(msg, absl::StrCat("pid ", job_->pid(), " ("))) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "io_uring")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "Nothing was stopped")) << msg;
  // Refused in validate: CRIU never ran, so it left no log of a dump.
  EXPECT_FALSE(absl::StrContains(msg, "dump.log")) << msg;
  const uint64_t now = job_->Status().value("main", uint64_t{0});
  EXPECT_TRUE(job_->WaitMain(now + 5, absl::Seconds(10))) << "the job does not run on";
  auto list = RunCli(cryod_->socket(), {"-o", "json", "list"});
  const auto listed = nlohmann::json::parse(list.out, nullptr, false);
  ASSERT_TRUE(listed.is_object()) << list.out;
  EXPECT_TRUE(listed.value("checkpoints", nlohmann::json::array()).empty()) << list.out;
}

TEST_F(CriuOptionsTest, AnUnlinkedFileWithAnotherLinkNeedsLinkRemap) {
  const std::string d = dir_ + "/linked";
  std::filesystem::create_directories(d);
  StartJob({"--linked-unlinked", d});
  ExpectRefusedNaming(Checkpoint("lr-1", {"--link-remap=false"}), "link-remap");
  CheckpointAndRestore("lr-2");  // link_remap is on by default
  EXPECT_EQ(job_->Status().value("ok", 0), 1) << job_->Status();
}

TEST_F(CriuOptionsTest, AUnixSocketConnectedOutsideNeedsExtUnixSk) {
  // The outside end: a datagram socket the test binds, like /dev/log.
  const std::string path = dir_ + "/log.sock";
  int peer = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path.c_str());
  ASSERT_EQ(::bind(peer, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  StartJob({"--unix-dgram", path});
  ExpectRefusedNaming(Checkpoint("us-1"), "ext-unix-sk");
  CheckpointAndRestore("us-2", {"--ext-unix-sk"});
  // Datagrams still reach the outside end from the restored job.
  char buf[64];
  while (::recv(peer, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
  EXPECT_TRUE(
      WaitFor([&] { return ::recv(peer, buf, sizeof(buf), MSG_DONTWAIT) > 0; }, absl::Seconds(10)))
      << "no datagram from the restored job";
  ::close(peer);
}

TEST_F(CriuOptionsTest, AConnectionInAListenersQueueNeedsSkipInFlight) {
  const std::string port_file = dir_ + "/port";
  StartJob({"--listen-port-file", port_file});
  int port = 0;
  ASSERT_TRUE(WaitFor([&] { return (std::ifstream(port_file) >> port) && port > 0; }));
  // A client whose connection the job never accepts.
  int client = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ExpectRefusedNaming(Checkpoint("if-1"), "skip-in-flight");
  CheckpointAndRestore("if-2", {"--skip-in-flight"});
  // The listener came back: a new connection is queued again.
  int again = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(::connect(again, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ::close(again);
  ::close(client);
}

// Whether this network namespace has a TIME_WAIT socket on 127.0.0.1:`port`.
bool TimeWaitOn(int port) {
  std::ifstream in("/proc/net/tcp");
  char want[32];
  std::snprintf(want, sizeof(want), "0100007F:%04X", port);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string sl, local, remote, st;
    if ((f >> sl >> local >> remote >> st) && local == want && st == "06") return true;
  }
  return false;
}

int ConnectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// NCCL's bootstrap listens without SO_REUSEADDR and closes the connections it accepted: for 60 s
// their TIME_WAIT sockets hold the listener's port, and CRIU's restore of the listener failed
// with "Address already in use" (a 2-rank DDP job on two H200s, 2026-11-27). cryod clears them.
TEST_F(CriuOptionsTest, AListenerWhosePortATimeWaitSocketHoldsIsRestored) {
  const std::string port_file = dir_ + "/accept-port";
  StartJob({"--accept-port-file", port_file});
  int port = 0;
  ASSERT_TRUE(WaitFor([&] { return (std::ifstream(port_file) >> port) && port > 0; }));
  ASSERT_TRUE(TimeWaitOn(port)) << "the job left no TIME_WAIT socket: this test shows nothing";
  CheckpointAndRestore("tw-1");
  // The restored listener is the job's: it accepts a new connection.
  int c = ConnectLoopback(port);
  ASSERT_GE(c, 0);
  EXPECT_TRUE(WaitFor([&] { return job_->Status().value("accepted", 0) >= 1; })) << job_->Status();
  ::close(c);
}

// A port some other process took after the checkpoint is named, before anything is restored,
// and the checkpoint restores once it is free.
TEST_F(CriuOptionsTest, AListenerPortTakenByAnotherProcessIsRefusedAndTheCheckpointKept) {
  const std::string port_file = dir_ + "/port";
  StartJob({"--listen-port-file", port_file});
  int port = 0;
  ASSERT_TRUE(WaitFor([&] { return (std::ifstream(port_file) >> port) && port > 0; }));
  auto r = Checkpoint("taken-1");
  ASSERT_EQ(r.first, 0) << r.second;
  ASSERT_TRUE(WaitFor([&] {
    job_->Reap();
    return job_->State() == '-';
  }));
  int squatter = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(squatter, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(squatter, 1), 0);
  auto rr = RunCli(cryod_->socket(), {"-o", "json", "restore", "taken-1"});
  EXPECT_NE(rr.code, 0);
  auto j = nlohmann::json::parse(rr.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << rr.out;
  EXPECT_EQ(j["error"].value("code", ""), "FAILED_PRECONDITION") << rr.out;
  const std::string msg = j["error"].value("message", "");
  EXPECT_TRUE(absl::StrContains(msg, absl::StrCat("127.0.0.1:", port))) << msg;
  EXPECT_TRUE(absl::StrContains(msg, absl::StrCat("pid ", ::getpid()))) << msg;
  ::close(squatter);
  const uint64_t before = job_->Status().value("main", uint64_t{0});
  auto again = RunCli(cryod_->socket(), {"restore", "taken-1"});
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(job_->WaitMain(before + 20, absl::Seconds(20))) << "the restored job is stuck";
  int c = ConnectLoopback(port);
  EXPECT_GE(c, 0) << "the restored listener does not take connections";
  if (c >= 0) ::close(c);
}

TEST_F(CriuOptionsTest, TcpCloseRestoresTheConnectionClosed) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  StartJob({"--tcp-connect", std::to_string(ntohs(sa.sin_port))});
  int conn = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  EXPECT_EQ(job_->Status().value("tcp", ""), "open");
  // An established connection is refused without a TCP option.
  auto r = Checkpoint("tc-1");
  ExpectRefusedNaming(r, "tcp-established");
  CheckpointAndRestore("tc-2", {"--tcp-close"});
  EXPECT_TRUE(
      WaitFor([&] { return job_->Status().value("tcp", "") == "closed"; }, absl::Seconds(10)))
      << job_->Status();
  ::close(conn);
  ::close(listener);
}

}  // namespace
}  // namespace cryo::e2e
