#pragma once

// The fixture of the process-mode integration tests: real cryod nodes on a shared store in a temp
// dir, workloads, and the helpers the suites share (process_test.cc, gpu_fastpath_test.cc).

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "e2e/process/harness.h"
#include "gtest/gtest.h"

namespace cryo::e2e {

// True when `dir` has no entries (a store's .staging or a node's journal after an undo).
inline bool EmptyDir(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_empty(dir, ec) && !ec;
}

// No operation in flight in cryod's journal: no entry (the lock cryod holds there is none).
inline bool NoJournalEntries(const std::string& dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return false;
  for (const auto& f : it) {
    if (f.path().extension() == ".json") return false;
  }
  return true;
}

// Waits until the job is gone, reaping it when it is our child (a checkpoint that stops it).
inline bool WaitGone(Workload& w) {
  return WaitFor([&] {
    w.Reap();
    return w.State() == '-';
  });
}

struct HookPoint {
  std::string dir, name;
  HookPoint(const std::string& d, const std::string& n) : dir(d), name(n) {
    std::ofstream(dir + "/" + name + ".enable") << "1";
  }
  bool Reached() {
    return WaitFor([&] { return ::access((dir + "/" + name + ".reached").c_str(), F_OK) == 0; });
  }
  void Release() { std::ofstream(dir + "/" + name + ".release") << "1"; }
};

class ProcessFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (CRIU)";
    dir_ = MakeTempDir("cryo-e2e");
    ASSERT_FALSE(dir_.empty());
    store_ = dir_ + "/store";
  }
  void TearDown() override {
    workloads_.clear();
    for (auto& n : nodes_) {
      const std::string why = n->StopCleanly();
      EXPECT_TRUE(why.empty()) << why;
    }
    nodes_.clear();
    for (const auto& m : mounts_) ::umount2(m.c_str(), MNT_DETACH);
    if (!dir_.empty() && !HasFailure()) std::system(("rm -rf " + dir_).c_str());
    if (HasFailure()) std::fprintf(stderr, "test files kept in %s\n", dir_.c_str());
  }

  // The environment of a cryod that stops at the test hooks under hook_dir() (see HookPoint).
  std::string hook_dir() const { return dir_ + "/hooks"; }
  std::vector<std::string> HookEnv() {
    ::mkdir(hook_dir().c_str(), 0700);
    return {"CRYOD_TEST_HOOK_DIR=" + hook_dir()};
  }

  Cryod& Node(const std::string& name, std::vector<std::string> extra = {},
              std::vector<std::string> env = {}) {
    auto c = Cryod::Start(dir_, store_, name, std::move(extra), std::move(env));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) std::abort();
    nodes_.push_back(std::move(*c));
    return *nodes_.back();
  }

  // Two nodes' cryods on one machine and store, each serving the Peer service and knowing the
  // other's, with one token, over mutual TLS with one certificate; node-b gets `b_env`.
  std::pair<Cryod*, Cryod*> TwoNodes(std::vector<std::string> b_env = {}) {
    const std::string token = dir_ + "/peer.token";
    { std::ofstream(token) << "peer-token-of-the-e2e-cluster\n"; }
    tls_dir_ = dir_ + "/peer-tls";
    std::filesystem::create_directories(tls_dir_);
    std::string why;
    EXPECT_TRUE(MakePeerTls(tls_dir_, "cryo-peer", &why)) << why;
    const int pa = FreePort();
    peer_port_b_ = FreePort();
    auto peer = [&](int self, const std::string& other, int other_port) {
      return std::vector<std::string>{
          "--peer-listen=127.0.0.1:" + std::to_string(self), "--peer-token-file=" + token,
          "--peers=" + other + "=127.0.0.1:" + std::to_string(other_port),
          "--peer-process-members=true", "--peer-tls-dir=" + tls_dir_};
    };
    Cryod& a = Node("node-a", peer(pa, "node-b", peer_port_b_));
    Cryod& b = Node("node-b", peer(peer_port_b_, "node-a", pa), std::move(b_env));
    return {&a, &b};
  }
  Workload& Job(int mem_mib, int threads = 4, std::vector<std::string> extra = {}) {
    auto w = Workload::Start(dir_, mem_mib, threads, std::move(extra));
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) std::abort();
    workloads_.push_back(std::move(*w));
    return *workloads_.back();
  }

  v1::CheckpointRequest Req(pid_t pid, const std::string& id, bool leave_running = false) {
    v1::CheckpointRequest r;
    r.set_pid(pid);
    r.set_checkpoint_id(id);
    r.set_leave_running(leave_running);
    return r;
  }

  v1::RestoreRequest RestoreReq(const std::string& id, uint32_t wait_ms = 10000) {
    v1::RestoreRequest r;
    r.set_checkpoint_id(id);
    r.set_pid_wait_timeout_ms(wait_ms);
    return r;
  }

  // The job keeps running: not stopped, and its counter moves.
  void ExpectRunning(Workload& w) {
    EXPECT_NE(w.State(), 'T') << "job left stopped";
    EXPECT_NE(w.State(), '-') << "job is gone";
    uint64_t now = w.Status().value("main", uint64_t{0});
    EXPECT_TRUE(w.WaitMain(now + 5, absl::Seconds(10))) << "job counter does not advance";
  }

  // Stages never go back, and each of `must` was reported.
  static void ExpectStagesInOrder(const std::vector<v1::Progress>& events,
                                  const std::vector<v1::Stage>& must) {
    ASSERT_FALSE(events.empty()) << "no progress events";
    for (size_t i = 1; i < events.size(); ++i) {
      EXPECT_LE(events[i - 1].stage(), events[i].stage()) << "event " << i;
      EXPECT_LE(events[i - 1].elapsed_ms(), events[i].elapsed_ms()) << "event " << i;
    }
    for (v1::Stage st : must) {
      EXPECT_TRUE(std::any_of(events.begin(), events.end(),
                              [st](const v1::Progress& p) { return p.stage() == st; }))
          << v1::Stage_Name(st) << " never reported";
    }
  }
  static v1::Progress LastOf(const std::vector<v1::Progress>& events, v1::Stage st) {
    v1::Progress last;
    for (const auto& p : events) {
      if (p.stage() == st) last = p;
    }
    return last;
  }

  std::string dir_, store_;
  int peer_port_b_ = 0;  // node-b's Peer service (TwoNodes)
  std::string tls_dir_;  // the nodes' peer certificate (TwoNodes)
  std::vector<std::unique_ptr<Cryod>> nodes_;
  std::vector<std::unique_ptr<Workload>> workloads_;
  std::vector<std::string> mounts_;
};

}  // namespace cryo::e2e
