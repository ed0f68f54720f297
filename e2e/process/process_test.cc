// Integration tests of process mode: real cryod, real CRIU 4.1, real processes.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "e2e/process/fixture.h"
#include "e2e/process/harness.h"
#include "gtest/gtest.h"
#include "test/http_get_local.h"

namespace cryo::e2e {
namespace {

using grpc::StatusCode;

// A pid no process or thread has now. kill() answers ESRCH for a thread's id too, and cryod's
// own threads are numbered among them: /proc/<tid> exists for those (a thread-id target is
// refused as INVALID_ARGUMENT, not NOT_FOUND).
pid_t FreePid() {
  pid_t p = 30000;
  while (::kill(p, 0) == 0 || errno != ESRCH ||
         std::filesystem::exists("/proc/" + std::to_string(p))) {
    ++p;
  }
  return p;
}

class ProcessTest : public ProcessFixture {
 protected:
  // Checkpoint (stop), reap the dead job, restore, and check the job went on from where it was.
  // A CRIU that, asked to dump, touches `gate`.started and waits for `gate`.go first: cryod
  // is then held in its "dumping" state. Its path; empty if it could not be written.
  std::string SlowCriu(const std::string& gate) {
    const std::string slow = dir_ + "/criu-slow";
    std::ofstream(slow) << "#!/bin/sh\n"
                        << "if [ \"$1\" = dump ]; then touch " << gate << ".started\n"
                        << "  while [ ! -e " << gate << ".go ]; do sleep 0.01; done\nfi\n"
                        << "PATH=/usr/local/sbin:$PATH exec criu \"$@\"\n";
    return ::chmod(slow.c_str(), 0755) == 0 ? slow : "";
  }

  // The bytes of anonymous memory cryod's log says it copied for checkpoint `id`.
  static uint64_t AnonBytesCopied(const Cryod& c, const std::string& id) {
    const std::string log = Slurp(c.log());
    const std::string key = absl::StrCat("checkpoint ", id, ": ");
    const size_t at = log.find(key);
    if (at == std::string::npos) return 0;
    const size_t end = log.find(" bytes of anonymous memory", at);
    uint64_t n = 0;
    if (end == std::string::npos ||
        !absl::SimpleAtoi(log.substr(at + key.size(), end - at - key.size()), &n)) {
      return 0;
    }
    return n;
  }

  void CheckpointKillRestore(Cryod& a, Cryod& b, int mem_mib, const std::string& id) {
    Workload& w = Job(mem_mib);
    ASSERT_TRUE(w.WaitMain(20));
    const auto before = w.Status();
    v1::CheckpointInfo info;
    std::vector<v1::Progress> progress;
    ASSERT_TRUE(a.Checkpoint(Req(w.pid(), id), &info, &progress).ok());
    EXPECT_EQ(info.checkpoint_id(), id);
    EXPECT_GT(info.size_bytes(), static_cast<uint64_t>(mem_mib) << 20);
    // Progress came as it happened: stages in order, the dump counting the bytes written.
    ExpectStagesInOrder(progress, {v1::STAGE_DUMP, v1::STAGE_PUBLISH});
    EXPECT_GT(LastOf(progress, v1::STAGE_DUMP).bytes_done(), 0u);
    // The job's memory was copied by cryod at CRIU's post-dump, not by CRIU (criu/anon_pages.h):
    // the restore below reads the images cryod wrote.
    EXPECT_GE(AnonBytesCopied(a, id), static_cast<uint64_t>(mem_mib) << 20);
    // The counter the job shares with its child (MAP_SHARED | MAP_ANONYMOUS) too.
    EXPECT_NE(Slurp(a.log()).find("(2 task(s), 1 shared segment(s)) copied"), std::string::npos);
    // Preemption semantics: the job is gone once the checkpoint is published.
    ASSERT_TRUE(WaitGone(w));
    const auto last = w.Status();  // what the job wrote last before it was stopped
    ASSERT_GE(last.value("main", 0), before.value("main", 0));

    v1::RestoreResult res;
    progress.clear();
    grpc::Status s = b.Restore(RestoreReq(id), &res, &progress);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ExpectStagesInOrder(progress, {v1::STAGE_VERIFY, v1::STAGE_RESTORE});
    // The verify stage hashes every image but the pages images, which are hashed while CRIU
    // restores from them (CorruptedOrTruncatedImageIsRefused shows a bad one refused).
    const v1::Progress verify = LastOf(progress, v1::STAGE_VERIFY);
    EXPECT_GT(verify.bytes_total(), 0u);
    EXPECT_LT(verify.bytes_total(), static_cast<uint64_t>(mem_mib) << 20);
    EXPECT_EQ(verify.bytes_done(), verify.bytes_total()) << "every byte verified";
    EXPECT_EQ(res.root_pid(), w.pid()) << "restored tree keeps its pids";
    ASSERT_TRUE(w.WaitMain(last.value("main", uint64_t{0}) + 10)) << "job does not run on";
    const auto after = w.Status();
    // Same process memory (nonce), and every counter continues instead of starting over.
    EXPECT_EQ(after["nonce"], before["nonce"]);
    EXPECT_EQ(after["child_pid"], before["child_pid"]);
    EXPECT_GE(after.value("main", 0), last.value("main", 0));
    EXPECT_GE(after.value("child", 0), last.value("child", 0));
    EXPECT_GE(after.value("shm", 0), last.value("shm", 0));
    EXPECT_GE(after.value("pipe_msgs", 0), last.value("pipe_msgs", 0));
    for (size_t i = 0; i < last["threads"].size(); ++i) {
      EXPECT_GE(after["threads"][i].get<uint64_t>(), last["threads"][i].get<uint64_t>());
    }
    EXPECT_GT(last.value("main", 0), 15) << "checkpointed value should be well above zero";
    EXPECT_EQ(w.Verify(), 1) << "memory pattern, deleted file or pipe stream damaged";
  }
};

TEST_F(ProcessTest, CheckpointKillRestore256MiB) {
  Cryod& a = Node("node-a");
  CheckpointKillRestore(a, a, 256, "same-node");
}

TEST_F(ProcessTest, RestoreOnAnotherNodeFromSharedStore) {
  Cryod& a = Node("node-a");
  Cryod& b = Node("node-b");
  CheckpointKillRestore(a, b, 256, "cross-node");
  auto list = b.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].node_name(), "node-a") << "manifest records the source node";
}

TEST_F(ProcessTest, EstablishedTcpConnectionSurvives) {
  Cryod& a = Node("node-a");
  Workload& w = Job(16, 2, {"--tcp"});
  ASSERT_TRUE(WaitFor([&] { return w.Status().value("tcp_echoes", 0) > 10; }));
  auto req = Req(w.pid(), "tcp");
  req.set_tcp_established(true);
  grpc::Status s = a.Checkpoint(req);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(WaitGone(w));
  const uint64_t last = w.Status().value("tcp_echoes", uint64_t{0});
  s = a.Restore(RestoreReq("tcp"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  // Pings keep crossing the same connection: it was restored, not reopened.
  EXPECT_TRUE(WaitFor([&] { return w.Status().value("tcp_echoes", uint64_t{0}) > last + 20; }))
      << w.Status().dump();
  EXPECT_EQ(w.Verify(), 1) << "connection broke or memory damaged";
}

TEST_F(ProcessTest, LeaveRunningThenRestoreWhilePidsTaken) {
  Cryod& a = Node("node-a");
  Workload& w = Job(32);
  ASSERT_TRUE(w.WaitMain(10));
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "live", true)).ok());
  ExpectRunning(w);
  grpc::Status s = a.Restore(RestoreReq("live", 300));
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), absl::StrCat("pid ", w.pid())))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "waited")) << s.error_message();
  ExpectRunning(w);
}

// A leave-running checkpoint dumps into node memory and writes the images while the job runs on
// (dump_write): at that point the job runs and nothing is in the store yet; cryod killed there
// leaves nothing visible and the job running; the next one publishes a checkpoint that restores
// the job exactly.
TEST_F(ProcessTest, ALeaveRunningDumpGoesIntoMemoryAndIsWrittenAsTheJobRunsOn) {
  const std::vector<std::string> env = HookEnv();
  auto* a = &Node("node-a", {}, env);
  Workload& w = Job(64);
  ASSERT_TRUE(w.WaitMain(10));
  {
    HookPoint hp(hook_dir(), "before-dump-write");
    auto fut =
        std::async(std::launch::async, [&] { return a->Checkpoint(Req(w.pid(), "mem-1", true)); });
    ASSERT_TRUE(hp.Reached());
    // Dumped, and the job already runs on while its images wait in memory.
    const uint64_t at = w.Status().value("main", uint64_t{0});
    EXPECT_TRUE(w.WaitMain(at + 3)) << "the job is held while its dump is written";
    size_t images_in_store = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(store_ + "/.staging", ec)) {
      images_in_store += absl::EndsWith(e.path().filename().string(), ".img");
    }
    EXPECT_EQ(images_in_store, 0u) << "the images went to the store before the job ran on";
    a->Kill9();
    EXPECT_FALSE(fut.get().ok());
    ::unlink((hook_dir() + "/before-dump-write.enable").c_str());
  }
  a = &Node("node-a", {}, env);  // restart on the same state dir
  ExpectRunning(w);
  EXPECT_TRUE(a->List().empty()) << "a checkpoint whose images were only in memory is visible";
  EXPECT_TRUE(EmptyDir(store_ + "/.staging"));
  EXPECT_TRUE(NoJournalEntries(a->state_dir() + "/journal"));

  v1::CheckpointInfo info;
  grpc::Status s = a->Checkpoint(Req(w.pid(), "mem-2", true), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.stage_ms().count("dump_write"), 1u) << "not dumped into memory";
  ExpectRunning(w);
  const uint64_t at = w.Status().value("main", uint64_t{0});
  w.Kill();
  ASSERT_TRUE(WaitGone(w));
  s = a->Restore(RestoreReq("mem-2"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(w.WaitMain(at + 5));
  EXPECT_EQ(w.Verify(), 1) << "memory pattern, deleted file or pipe stream damaged";
}

TEST_F(ProcessTest, RefusesBadTargets) {
  Cryod& a = Node("node-a");
  const pid_t free_pid = FreePid();
  grpc::Status s = a.Checkpoint(Req(free_pid, ""));
  EXPECT_EQ(s.error_code(), StatusCode::NOT_FOUND) << s.error_message();

  s = a.Checkpoint(Req(1, ""));
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();

  s = a.Checkpoint(Req(a.pid(), ""));
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "cryod")) << s.error_message();

  // kthreadd is pid 2 in the initial pid namespace.
  ASSERT_TRUE(absl::StrContains(Slurp("/proc/2/stat"), "(kthreadd)"));
  s = a.Checkpoint(Req(2, ""));
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "kernel thread")) << s.error_message();
  EXPECT_TRUE(a.List().empty());
}

TEST_F(ProcessTest, RefusesUnsafeIds) {
  Cryod& a = Node("node-a");
  Workload& w = Job(8);
  for (const std::string& id :
       std::vector<std::string>{"../x", "a/b", ".hidden", "-rf", std::string(200, 'a')}) {
    grpc::Status s = a.Checkpoint(Req(w.pid(), id));
    EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << id << ": " << s.error_message();
    s = a.Restore(RestoreReq(id));
    EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << id;
    grpc::ClientContext ctx;
    v1::DeleteCheckpointRequest d;
    d.set_checkpoint_id(id);
    v1::DeleteCheckpointResponse dr;
    EXPECT_EQ(a.stub().DeleteCheckpoint(&ctx, d, &dr).error_code(), StatusCode::INVALID_ARGUMENT);
  }
  // "../x" would land beside checkpoints/ in the store, or beside the store.
  for (const std::string& p : {store_ + "/x", dir_ + "/x", store_ + "/checkpoints/x"}) {
    EXPECT_NE(::access(p.c_str(), F_OK), 0) << p << " exists: ../x escaped";
  }
  EXPECT_TRUE(a.List().empty()) << "a refused id left a checkpoint";
  std::error_code ec;
  EXPECT_TRUE(std::filesystem::is_empty(store_ + "/.staging", ec) || ec) << "a stage was left";
  grpc::Status s = a.Restore(RestoreReq("no-such-checkpoint"));
  EXPECT_EQ(s.error_code(), StatusCode::NOT_FOUND) << s.error_message();
  ExpectRunning(w);
}

TEST_F(ProcessTest, CorruptedOrTruncatedImageIsRefused) {
  Cryod& a = Node("node-a");
  Workload& w = Job(16);
  ASSERT_TRUE(w.WaitMain(10));
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "victim")).ok());
  ASSERT_TRUE(WaitGone(w));
  const std::string pages = store_ + "/checkpoints/victim/images/pages-1.img";
  struct stat st;
  ASSERT_EQ(::stat(pages.c_str(), &st), 0);

  // One flipped byte in the middle of the memory image.
  {
    std::fstream f(pages, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(st.st_size / 2);
    char c;
    f.get(c);
    f.seekp(st.st_size / 2);
    f.put(static_cast<char>(c ^ 0x40));
  }
  grpc::Status s = a.Restore(RestoreReq("victim"));
  EXPECT_EQ(s.error_code(), StatusCode::DATA_LOSS) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "images/pages-1.img")) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "checksum")) << s.error_message();
  // The pages images are hashed while CRIU restores from them, and CRIU kills what it restored
  // at its gate, before any of it runs: the pid is free, or a zombie that init has yet to reap.
  const auto dead = [&] { return w.State() == '-' || w.State() == 'Z'; };
  EXPECT_TRUE(dead()) << "nothing may run from a damaged checkpoint: state " << w.State();
  // Remembered in the store, for `cryo list` and automatic resumes.
  auto listed = a.List();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(absl::StrContains(listed[0].damaged(), "images/pages-1.img")) << listed[0].damaged();
  auto cli = RunCli(a.socket(), {"list"});
  EXPECT_TRUE(absl::StrContains(cli.out, "victim (DAMAGED)")) << cli.out;

  ASSERT_EQ(::truncate(pages.c_str(), st.st_size / 3), 0);
  s = a.Restore(RestoreReq("victim"));
  EXPECT_EQ(s.error_code(), StatusCode::DATA_LOSS) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "images/pages-1.img")) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "truncated")) << s.error_message();
  EXPECT_TRUE(dead()) << "state " << w.State();
}

TEST_F(ProcessTest, GpuCheckpointOnANodeWithoutItsDriverIsRefusedBeforeAnythingStarts) {
#ifndef CRYO_GPU_PLUGIN_DIR
  GTEST_SKIP() << "built without the GPU plugins (CRYO_WITH_PLUGINS=OFF)";
#else
  // node-b loads the real GPU plugins; this machine has no NVIDIA driver (CI never has one).
  Cryod& a = Node("node-a");
  Cryod& b = Node("node-b", {"--gpu-plugin-dir", CRYO_GPU_PLUGIN_DIR});
  grpc::ClientContext ctx;
  v1::NodeInfoResponse node;
  ASSERT_TRUE(b.stub().NodeInfo(&ctx, v1::NodeInfoRequest(), &node).ok());
  const v1::PluginInfo* cuda = nullptr;
  for (const auto& p : node.plugins()) {
    if (p.name() == "cuda") cuda = &p;
  }
  ASSERT_NE(cuda, nullptr) << node.DebugString();
  if (cuda->available()) GTEST_SKIP() << "this machine has an NVIDIA driver: " << cuda->detail();
  EXPECT_FALSE(cuda->detail().empty()) << "NodeInfo must say why the plugin is unavailable";

  Workload& w = Job(16);
  ASSERT_TRUE(w.WaitMain(10));
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "gpu-job")).ok());
  ASSERT_TRUE(WaitGone(w));
  // The GPU section an H100 node wrote into a real checkpoint (2026-11-23), as if this job
  // had held that GPU.
  const std::string mpath = store_ + "/checkpoints/gpu-job/manifest.json";
  const std::string original = Slurp(mpath);
  auto m = nlohmann::json::parse(original);
  nlohmann::json dev = {{"uuid", "GPU-1f00ce25-fe1d-892c-2578-9ba55b65811e"},
                        {"name", "NVIDIA H100 80GB HBM3"},
                        {"chip", "sm_90"},
                        {"memory_used_bytes", 562036736}};
  m["gpu"] = {{"cuda",
               {{"vendor", "nvidia"},
                {"driver_version", "580.159.04"},
                {"cuda_version", 13000},
                {"devices", {dev}},
                {"processes", {{{"pid", w.pid()}, {"devices", {dev}}}}}}}};
  std::ofstream(mpath, std::ios::trunc) << m.dump(1);

  grpc::Status s = b.Restore(RestoreReq("gpu-job"));
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "cuda plugin is unavailable on this node"))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), cuda->detail())) << s.error_message();
  EXPECT_EQ(w.State(), '-') << "nothing may start on a node without the checkpoint's GPU";
  EXPECT_TRUE(b.List().size() == 1 && b.List()[0].damaged().empty())
      << "a refused restore must leave the checkpoint as it was";

  // The same checkpoint without its GPU section restores on that node: nothing was used up.
  std::ofstream(mpath, std::ios::trunc) << original;
  s = b.Restore(RestoreReq("gpu-job"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(WaitFor([&] { return w.State() != '-'; }));
  EXPECT_EQ(w.Verify(), 1);
#endif
}

TEST_F(ProcessTest, FullStoreFailsCleanlyAndJobRuns) {
  const std::string small = dir_ + "/small";
  ASSERT_EQ(::mkdir(small.c_str(), 0700), 0);
  ASSERT_EQ(::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=48m"), 0) << strerror(errno);
  mounts_.push_back(small);
  store_ = small;
  Cryod& a = Node("node-a", {"--health-min-free-mb", "8"});
  EXPECT_TRUE(absl::StrContains(HttpGetLocal(a.metrics_port(), "/healthz"), " 200 "));
  Workload& w = Job(128);
  ASSERT_TRUE(w.WaitMain(10));
  grpc::Status s = a.Checkpoint(Req(w.pid(), "too-big"));
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  ExpectRunning(w);
  EXPECT_TRUE(a.List().empty());
  EXPECT_EQ(Slurp(small + "/checkpoints/too-big/manifest.json"), "");
  EXPECT_TRUE(EmptyDir(small + "/.staging")) << "staging not cleaned";
  EXPECT_EQ(w.Verify(), 1);

  // Found on 2026-11-24: /healthz said ok with the store 100 % full. Filled by another writer,
  // the store makes cryod unready (not dead), and ready again once there is room.
  const std::string filler = small + "/filler";
  {
    std::ofstream f(filler, std::ios::binary);
    std::string mib(1 << 20, 'x');
    while (f.write(mib.data(), mib.size())) {
    }
  }
  std::string h = HttpGetLocal(a.metrics_port(), "/healthz");
  EXPECT_TRUE(absl::StrContains(h, " 503 ")) << h;
  EXPECT_TRUE(absl::StrContains(h, "free")) << h;
  ASSERT_EQ(::unlink(filler.c_str()), 0);
  h = HttpGetLocal(a.metrics_port(), "/healthz");
  EXPECT_TRUE(absl::StrContains(h, " 200 ")) << h;
}

// Found on 2026-11-24: a store directory deleted under a running cryod went unnoticed by
// /healthz, and once made again the API answered 404 until cryod restarted.
TEST_F(ProcessTest, ADeletedStoreIsNoticedAndARecreatedOneUsedAgain) {
  Cryod& a = Node("node-a", {"--health-min-free-mb", "1"});
  Workload& w = Job(8);
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "before", true)).ok());
  const int port = a.metrics_port();
  ASSERT_GT(port, 0);
  std::filesystem::remove_all(store_);
  std::string h = HttpGetLocal(port, "/healthz");
  EXPECT_TRUE(absl::StrContains(h, " 503 ")) << h;
  EXPECT_TRUE(absl::StrContains(h, "does not exist")) << h;
  std::string l = HttpGetLocal(port, "/v1/checkpoints");
  EXPECT_TRUE(absl::StrContains(l, " 503 ")) << l;

  ASSERT_EQ(::mkdir(store_.c_str(), 0700), 0);
  h = HttpGetLocal(port, "/healthz");
  EXPECT_TRUE(absl::StrContains(h, " 200 ")) << h;
  l = HttpGetLocal(port, "/v1/checkpoints");
  EXPECT_TRUE(absl::StrContains(l, " 200 ")) << l;
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "after", true)).ok());
  auto list = a.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].checkpoint_id(), "after");
  ExpectRunning(w);
}

TEST_F(ProcessTest, ReadOnlyStoreFailsCleanlyAndJobRuns) {
  const std::string ro = dir_ + "/ro";
  ASSERT_EQ(::mkdir(ro.c_str(), 0700), 0);
  ASSERT_EQ(::mount("tmpfs", ro.c_str(), "tmpfs", 0, "size=16m"), 0) << strerror(errno);
  mounts_.push_back(ro);
  store_ = ro;
  Cryod& a = Node("node-a");  // creates the store layout while writable
  ASSERT_EQ(::mount(nullptr, ro.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0);
  Workload& w = Job(8);
  grpc::Status s = a.Checkpoint(Req(w.pid(), "nope"));
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "read-only")) << s.error_message();
  ExpectRunning(w);
  EXPECT_TRUE(a.List().empty());
}

// Holds cryod at a named point of a checkpoint (CRYOD_TEST_HOOK_DIR) while the test acts.

TEST_F(ProcessTest, ProcessExitingMidCheckpointFailsCleanly) {
  Cryod& a = Node("node-a", {}, HookEnv());
  Workload& w = Job(16);
  HookPoint hp(hook_dir(), "before-dump");
  auto fut = std::async(std::launch::async, [&] { return a.Checkpoint(Req(w.pid(), "gone")); });
  ASSERT_TRUE(hp.Reached());
  ::kill(w.pid(), SIGKILL);
  ASSERT_TRUE(WaitGone(w));
  hp.Release();
  grpc::Status s = fut.get();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.error_code() == StatusCode::ABORTED || s.error_code() == StatusCode::NOT_FOUND)
      << s.error_code() << ": " << s.error_message();
  EXPECT_TRUE(a.List().empty());
  EXPECT_TRUE(EmptyDir(store_ + "/.staging"));
}

TEST_F(ProcessTest, CheckpointPastTheCallersDeadlineIsNotPublishedAndTheJobRunsOn) {
  Cryod& a = Node("node-a", {}, HookEnv());
  Workload& w = Job(16);
  ASSERT_TRUE(w.WaitMain(10));
  HookPoint hp(hook_dir(), "before-publish");  // the dump is done, the job stopped by it
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  auto fut = std::async(std::launch::async, [&] {
    auto r = a.stub().Checkpoint(&ctx, Req(w.pid(), "late"));
    v1::OperationEvent ev;
    while (r->Read(&ev)) {
    }
    return r->Finish();
  });
  ASSERT_TRUE(hp.Reached());
  grpc::Status s = fut.get();  // the caller gives up at its deadline, as the shim does
  EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  // cryod's copy of the deadline is the timeout counted from when the call reached it, a few
  // ms after the caller's.
  absl::SleepFor(absl::Milliseconds(500));
  hp.Release();
  // cryod sees the deadline gone before publishing: nothing published, the job resumed.
  ASSERT_TRUE(WaitFor([&] {
    return absl::StrContains(Slurp(a.log()), "not published, the job was resumed");
  })) << Slurp(a.log());
  ExpectRunning(w);
  EXPECT_TRUE(a.List().empty());
  EXPECT_TRUE(EmptyDir(store_ + "/.staging"));
}

TEST_F(ProcessTest, CryodKilledMidCheckpointLeavesJobRunningAndNothingVisible) {
  const std::vector<std::string> env = HookEnv();
  auto* a = &Node("node-a", {}, env);
  Workload& w = Job(64);
  ASSERT_TRUE(w.WaitMain(10));
  HookPoint hp(hook_dir(), "after-dump");
  auto fut = std::async(std::launch::async, [&] { return a->Checkpoint(Req(w.pid(), "half")); });
  ASSERT_TRUE(hp.Reached());
  // The dump is written and the job is stopped, waiting for the publish that never comes.
  EXPECT_EQ(w.State(), 'T');
  a->Kill9();
  EXPECT_FALSE(fut.get().ok());
  ::unlink((hook_dir() + "/after-dump.enable").c_str());
  a = &Node("node-a", {}, env);  // restart on the same state dir
  ExpectRunning(w);
  EXPECT_TRUE(a->List().empty());
  EXPECT_TRUE(EmptyDir(store_ + "/.staging"));
  EXPECT_TRUE(NoJournalEntries(a->state_dir() + "/journal"));
  EXPECT_EQ(w.Verify(), 1);
}

TEST_F(ProcessTest, CryodKilledWhileCriuDumpsWaitsForCriuThenRollsBack) {
  // A CRIU that waits at a gate before dumping holds cryod in its "dumping" state.
  const std::string gate = dir_ + "/criu-gate";
  const std::string slow = SlowCriu(gate);
  ASSERT_FALSE(slow.empty());
  // CRIU copies the memory itself here: with cryod's copy at its post-dump gate, CRIU would
  // find cryod gone there and resume the job (CryodKilledBeforeCriusPostDumpLeavesTheJobRunning).
  auto* a = &Node("node-a", {"--criu", slow, "--dump-copy-threads", "0"});
  Workload& w = Job(64);
  ASSERT_TRUE(w.WaitMain(10));
  auto fut = std::async(std::launch::async, [&] { return a->Checkpoint(Req(w.pid(), "mid")); });
  ASSERT_TRUE(WaitFor([&] { return ::access((gate + ".started").c_str(), F_OK) == 0; }));
  const std::string journal = a->state_dir() + "/journal";
  ASSERT_TRUE(WaitFor([&] {
    return std::system(("grep -qr '\"dumping\"' " + journal).c_str()) == 0;
  })) << "journal does not say dumping";
  a->Kill9();
  EXPECT_FALSE(fut.get().ok());
  // CRIU goes on without cryod and leaves the job stopped, as any dump for a preemption does.
  std::ofstream(gate + ".go") << "1";
  ASSERT_TRUE(WaitFor([&] { return w.State() == 'T'; })) << "state " << w.State();
  // The restarted cryod waits for that CRIU to end, then undoes the checkpoint.
  a = &Node("node-a", {"--criu", slow, "--dump-copy-threads", "0"});
  ExpectRunning(w);
  EXPECT_EQ(w.Verify(), 1);
  EXPECT_TRUE(a->List().empty());
  EXPECT_TRUE(EmptyDir(store_ + "/.staging"));
  EXPECT_TRUE(NoJournalEntries(journal));
  EXPECT_NE(Slurp(a->log()).find("rolled_back"), std::string::npos);
}

// cryod copies the job's memory at CRIU's post-dump (criu/anon_pages.h). Killed before that,
// its gate refuses: CRIU resumes the job at once, even before cryod is back, and nothing of the
// checkpoint is left.
TEST_F(ProcessTest, CryodKilledBeforeCriusPostDumpLeavesTheJobRunning) {
  const std::string gate = dir_ + "/criu-gate";
  const std::string slow = SlowCriu(gate);
  ASSERT_FALSE(slow.empty());
  auto* a = &Node("node-a", {"--criu", slow});
  Workload& w = Job(64);
  ASSERT_TRUE(w.WaitMain(10));
  auto fut = std::async(std::launch::async, [&] { return a->Checkpoint(Req(w.pid(), "gate")); });
  ASSERT_TRUE(WaitFor([&] { return ::access((gate + ".started").c_str(), F_OK) == 0; }));
  const std::string ops = a->state_dir() + "/ops";
  a->Kill9();
  EXPECT_FALSE(fut.get().ok());
  std::ofstream(gate + ".go") << "1";
  // CRIU dumps, its gate finds cryod gone, and CRIU resumes the job instead of ending it.
  ASSERT_TRUE(WaitFor(
      [&] { return std::system(("grep -qr 'Post dump script passed with' " + ops).c_str()) == 0; },
      absl::Seconds(60)))
      << "CRIU's gate did not refuse";
  ExpectRunning(w);
  const uint64_t at = w.Status().value("main", uint64_t{0});
  EXPECT_TRUE(w.WaitMain(at + 3)) << "the job does not run on";
  a = &Node("node-a", {"--criu", slow});
  ExpectRunning(w);
  EXPECT_EQ(w.Verify(), 1);
  EXPECT_TRUE(a->List().empty());
  EXPECT_TRUE(EmptyDir(store_ + "/.staging"));
  EXPECT_TRUE(NoJournalEntries(a->state_dir() + "/journal"));
}

TEST_F(ProcessTest, CryodKilledRightAfterPublishFinishesTheCheckpoint) {
  // Published, but the journal never heard: the checkpoint is good, so the restarted cryod
  // finishes what was asked (the job stops) instead of resuming a job that now has a twin.
  const std::vector<std::string> env = HookEnv();
  auto* a = &Node("node-a", {}, env);
  Workload& w = Job(32);
  ASSERT_TRUE(w.WaitMain(10));
  HookPoint hp(hook_dir(), "after-publish");
  auto fut = std::async(std::launch::async, [&] { return a->Checkpoint(Req(w.pid(), "pub")); });
  ASSERT_TRUE(hp.Reached());
  uint64_t at = w.Status().value("main", uint64_t{0});
  a->Kill9();
  EXPECT_FALSE(fut.get().ok());
  ::unlink((hook_dir() + "/after-publish.enable").c_str());
  a = &Node("node-a", {}, env);
  ASSERT_TRUE(WaitGone(w)) << "job was not stopped";
  auto list = a->List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].checkpoint_id(), "pub");
  EXPECT_NE(Slurp(a->log()).find("completed_stopped"), std::string::npos);
  // And it restores: the counter goes on from where the dump caught it.
  ASSERT_TRUE(a->Restore(RestoreReq("pub")).ok());
  EXPECT_TRUE(w.WaitMain(at + 5));
  EXPECT_EQ(w.Verify(), 1);
}

TEST_F(ProcessTest, RestoreWaitsForPidsThatFreeUpInTime) {
  Cryod& a = Node("node-a");
  Workload& w = Job(16);
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "wait", /*leave_running=*/true)).ok());
  // The job still holds its pids when the restore starts; it goes half a second later.
  auto fut = std::async(std::launch::async, [&] { return a.Restore(RestoreReq("wait", 20000)); });
  absl::SleepFor(absl::Milliseconds(500));
  ::kill(w.pid(), SIGKILL);
  ASSERT_TRUE(WaitGone(w));
  grpc::Status s = fut.get();
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunning(w);
  EXPECT_EQ(w.Verify(), 1);
}

TEST_F(ProcessTest, RetentionKeepsNewestPerWorkload) {
  Cryod& a = Node("node-a", {"--retention-keep", "2"});
  Workload& w = Job(8);
  for (const char* id : {"r1", "r2", "r3"}) {
    auto req = Req(w.pid(), id, true);
    req.set_workload("trainer");
    ASSERT_TRUE(a.Checkpoint(req).ok());
  }
  auto list = a.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].checkpoint_id(), "r3");
  EXPECT_EQ(list[1].checkpoint_id(), "r2");
  ExpectRunning(w);
}

TEST_F(ProcessTest, CliJsonAndMetrics) {
  Cryod& a = Node("node-a");
  Workload& w = Job(8);
  auto r = RunCli(a.socket(), {"-o", "json", "node"});
  ASSERT_EQ(r.code, 0) << r.out;
  auto node = nlohmann::json::parse(r.out);
  EXPECT_EQ(node["criu_version"], "4.1.1");
  EXPECT_EQ(node["node_name"], "node-a");

  r = RunCli(a.socket(), {"-o", "json", "checkpoint", std::to_string(w.pid()), "--id", "cli-1",
                          "--leave-running", "--label", "team=ml"});
  ASSERT_EQ(r.code, 0) << r.out;
  auto cp = nlohmann::json::parse(r.out);
  EXPECT_EQ(cp["checkpoint_id"], "cli-1");
  EXPECT_EQ(cp["labels"]["team"], "ml");

  r = RunCli(a.socket(), {"-o", "json", "inspect", "cli-1"});
  ASSERT_EQ(r.code, 0) << r.out;
  auto manifest = nlohmann::json::parse(r.out);
  EXPECT_EQ(manifest["format"], "cryo.checkpoint/v1");
  EXPECT_EQ(manifest["target"]["root_pid"], w.pid());
  EXPECT_FALSE(manifest["files"].empty());

  r = RunCli(a.socket(), {"list"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(absl::StrContains(r.out, "cli-1")) << r.out;

  r = RunCli(a.socket(), {"rm", "cli-1"});
  EXPECT_EQ(r.code, 0) << r.out;
  r = RunCli(a.socket(), {"-o", "json", "inspect", "cli-1"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(nlohmann::json::parse(r.out)["error"]["code"], "NOT_FOUND") << r.out;
  // rm's per-checkpoint errors have the same shape as every other JSON error.
  r = RunCli(a.socket(), {"-o", "json", "rm", "cli-1"});
  EXPECT_EQ(r.code, 1);
  nlohmann::json rm = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(rm.is_array() && rm.size() == 1) << r.out;
  EXPECT_EQ(rm[0]["id"], "cli-1") << r.out;
  EXPECT_EQ(rm[0]["error"]["code"], "NOT_FOUND") << r.out;
  EXPECT_FALSE(rm[0]["error"].value("message", "").empty()) << r.out;
  r = RunCli(a.socket(), {"checkpoint"});
  EXPECT_EQ(r.code, 2) << "usage error";
  const pid_t free_pid = FreePid();
  r = RunCli(a.socket(), {"-o", "json", "checkpoint", std::to_string(free_pid)});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["error"]["code"], "NOT_FOUND") << r.out;
  r = RunCli(dir_ + "/nobody.sock", {"node"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(absl::StrContains(r.out, "cannot reach cryod")) << r.out;

  // /metrics counts the checkpoint; /healthz answers.
  int port = a.metrics_port();
  ASSERT_GT(port, 0);
  auto get = [&](const std::string& path) { return HttpGetLocal(port, path); };
  std::string metrics = get("/metrics");
  EXPECT_TRUE(
      absl::StrContains(metrics, "cryo_operations_total{op=\"checkpoint\",result=\"ok\"} 1"))
      << metrics;
  EXPECT_TRUE(absl::StrContains(
      metrics, "cryo_stage_duration_seconds_bucket{op=\"checkpoint\",stage=\"dump\""));
  // The unknown pid: counted by its status code and by the stage it failed in.
  EXPECT_TRUE(
      absl::StrContains(metrics, "cryo_operations_total{op=\"checkpoint\",result=\"not_found\"} 1"))
      << metrics;
  EXPECT_TRUE(
      absl::StrContains(metrics, "cryo_failed_stage_total{op=\"checkpoint\",stage=\"validate\"} 1"))
      << metrics;
  EXPECT_TRUE(absl::StrContains(get("/healthz"), "200 OK"));
  // Prometheus' text format, declared with its version and charset; series that never moved
  // exist at 0 (alerts on increase() see the first one); the build and the process.
  EXPECT_TRUE(absl::StrContains(metrics, "Content-Type: text/plain; version=0.0.4; charset=utf-8"))
      << metrics.substr(0, 300);
  for (const char* zero :
       {"cryo_operations_total{op=\"restore\",result=\"data_loss\"} 0",
        "cryo_failed_stage_total{op=\"checkpoint\",stage=\"publish\"} 0",
        "cryo_recovered_operations_total{action=\"rolled_back\"} 0",
        "cryo_operation_duration_seconds_bucket{op=\"restore\",le=\"3600\"} 0"}) {
    EXPECT_TRUE(absl::StrContains(metrics, zero)) << zero;
  }
  EXPECT_TRUE(absl::StrContains(
      metrics,
      absl::StrCat("cryo_build_info{component=\"cryod\",version=\"", CRYO_VERSION, "\"} 1")));
  for (const char* p : {"process_cpu_seconds_total ", "process_resident_memory_bytes ",
                        "process_open_fds ", "process_start_time_seconds "}) {
    EXPECT_TRUE(absl::StrContains(metrics, p)) << p;
  }
}

TEST_F(ProcessTest, SocketIsRootOnly) {
  Cryod& a = Node("node-a");
  struct stat st;
  ASSERT_EQ(::stat(a.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Even with the file mode out of the way, the peer-credential check refuses other uids.
  ASSERT_EQ(::chmod(a.socket().c_str(), 0666), 0);
  ::chmod(dir_.c_str(), 0755);
  // A fresh process (exec, not just fork: gRPC state must not be shared) as uid 65534.
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    ::execl(CRYO_BIN, CRYO_BIN, "--socket", a.socket().c_str(), "node", nullptr);
    ::_exit(4);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << "uid 65534 got an answer from cryod";
  EXPECT_TRUE(absl::StrContains(Slurp(a.log()), "refused connection"));
}

// Found on 2026-11-24: SIGTERM while an operation outlasted shutdown_grace_s freed the engine
// under the operation's thread (std::bad_alloc), and new operations were still accepted during
// the grace. Now new work is refused at once, the running checkpoint is cancelled once the grace
// is over, rolls back at its next step, and cryod exits cleanly after it.
TEST_F(ProcessTest, SigtermDuringACheckpointRefusesNewWorkAndRollsItBack) {
  Cryod& a = Node("node-a", {"--shutdown-grace-s", "1"}, HookEnv());
  Workload& w = Job(16);
  ASSERT_TRUE(w.WaitMain(10));
  HookPoint hp(hook_dir(), "before-publish");  // dumped: the job is stopped by CRIU
  auto fut = std::async(std::launch::async, [&] { return a.Checkpoint(Req(w.pid(), "term")); });
  ASSERT_TRUE(hp.Reached());
  auto stopped = std::async(std::launch::async, [&] { return a.Stop(); });
  // New operations are refused at once: the socket goes with the first step of the shutdown.
  EXPECT_TRUE(WaitFor([&] { return RunCli(a.socket(), {"node"}).code != 0; }, absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(1500));  // past the grace: the checkpoint is cancelled
  hp.Release();
  grpc::Status s = fut.get();
  EXPECT_FALSE(s.ok());
  int status = stopped.get();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "cryod status " << status;
  const std::string log = Slurp(a.log());
  EXPECT_TRUE(absl::StrContains(log, "cancelled")) << log;
  ExpectRunning(w);
  EXPECT_TRUE(EmptyDir(store_ + "/checkpoints"));
  EXPECT_TRUE(EmptyDir(store_ + "/.staging"));
  EXPECT_TRUE(NoJournalEntries(a.state_dir() + "/journal"));
}

// Found on 2026-11-24: a restore ignored its caller's deadline and restored the job 15 s after
// the client had given up.
TEST_F(ProcessTest, ARestoreEndsAtItsCallersDeadlineAndDoesNothingLater) {
  Cryod& a = Node("node-a");
  Workload& w = Job(16);
  ASSERT_TRUE(w.WaitMain(5));
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "dl", /*leave_running=*/true)).ok());
  // The job still runs, so the restore waits for its pids; the caller gives up after 2 s.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  auto r = a.stub().Restore(&ctx, RestoreReq("dl", /*wait_ms=*/60000));
  v1::OperationEvent ev;
  while (r->Read(&ev)) {
  }
  grpc::Status s = r->Finish();
  EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  // Freeing the pids now must not let the abandoned restore go on.
  w.Kill();
  ASSERT_TRUE(WaitGone(w));
  ASSERT_TRUE(WaitFor([&] { return NoJournalEntries(a.state_dir() + "/journal"); }));
  absl::SleepFor(absl::Seconds(2));
  const std::string log = Slurp(a.log());
  EXPECT_FALSE(absl::StrContains(log, "restored checkpoint dl")) << log;
}

TEST_F(ProcessTest, CryoCancelStopsARestoreWaitingForPids) {
  Cryod& a = Node("node-a");
  Workload& w = Job(16);
  ASSERT_TRUE(w.WaitMain(5));
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "cx", /*leave_running=*/true)).ok());
  v1::RestoreRequest req = RestoreReq("cx", /*wait_ms=*/60000);
  req.set_operation_id("re-cancel-me");
  auto fut = std::async(std::launch::async, [&] { return a.Restore(req); });
  ASSERT_TRUE(
      WaitFor([&] { return absl::StrContains(RunCli(a.socket(), {"node"}).out, "re-cancel-me"); }));
  const absl::Time t0 = absl::Now();
  auto c = RunCli(a.socket(), {"cancel", "re-cancel-me"});
  EXPECT_EQ(c.code, 0) << c.out;
  grpc::Status s = fut.get();
  EXPECT_EQ(s.error_code(), StatusCode::CANCELLED) << s.error_message();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  ExpectRunning(w);
  EXPECT_EQ(RunCli(a.socket(), {"cancel", "re-cancel-me"}).code, 1) << "already ended";
}

// Found in review: a CRIU restore that never finishes hung the operation with no bound, leaving
// a half-restored job. CRIU here (a wrapper around the real one) starts a process of the
// restored tree, then hangs: `cryo cancel` ends the restore within seconds, CRIU and that
// process are gone, and the checkpoint restores later.
TEST_F(ProcessTest, ARestoreWhoseCriuHangsEndsWithItsCancelAndLeavesNothing) {
  const std::string wrapper = dir_ + "/criu-hangs-on-restore";
  const std::string marker = dir_ + "/half-restored.pid";
  {
    std::ofstream f(wrapper);
    f << "#!/bin/sh\n"
      << "if [ \"$1\" = restore ] && [ ! -e " << dir_ << "/criu-ok ]; then\n"
      << "  sleep 1000 & echo $! > " << marker << "\n"
      << "  sleep 1000\n"
      << "fi\n"
      << "exec /usr/local/sbin/criu \"$@\"\n";
  }
  ASSERT_EQ(::chmod(wrapper.c_str(), 0755), 0);
  Cryod& a = Node("node-a", {"--criu", wrapper});
  Workload& w = Job(16);
  ASSERT_TRUE(w.WaitMain(5));
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "hang")).ok());
  ASSERT_TRUE(WaitGone(w));
  v1::RestoreRequest req = RestoreReq("hang");
  req.set_operation_id("re-hang");
  auto fut = std::async(std::launch::async, [&] { return a.Restore(req); });
  ASSERT_TRUE(WaitFor([&] { return ::access(marker.c_str(), F_OK) == 0; }));
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(RunCli(a.socket(), {"cancel", "re-hang"}).code, 0);
  grpc::Status s = fut.get();
  EXPECT_EQ(s.error_code(), StatusCode::CANCELLED) << s.error_message();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  const std::string half = Slurp(marker);
  pid_t pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(half), &pid)) << half;
  EXPECT_TRUE(WaitFor([&] { return ::kill(pid, 0) != 0; })) << "a half-restored process is left";
  EXPECT_EQ(w.State(), '-');
  // Nothing was spent: with CRIU working again the same checkpoint restores.
  std::ofstream(dir_ + "/criu-ok") << "1";
  s = a.Restore(RestoreReq("hang"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunning(w);
}

// Found on 2026-11-24: one manifest whose "format" was a number aborted cryod on every node
// that listed the store.
TEST_F(ProcessTest, DamagedManifestsInASharedStoreNeitherCrashNorHideTheOthers) {
  Cryod& a = Node("node-a");
  Workload& w = Job(16);
  ASSERT_TRUE(w.WaitMain(5));
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "good", /*leave_running=*/true)).ok());
  auto plant = [&](const std::string& id, const std::string& manifest) {
    std::filesystem::create_directories(store_ + "/checkpoints/" + id);
    std::ofstream(store_ + "/checkpoints/" + id + "/manifest.json") << manifest;
  };
  plant("bad-format", R"({"format": 7, "id": "bad-format"})");
  plant("bad-container", R"({"format": "cryo.checkpoint/v1", "id": "bad-container",
      "kind": "container", "target": {"root_pid": 5}, "source": {}, "files": []})");
  plant("deep", R"({"format": "cryo.checkpoint/v1", "labels": )" + std::string(100000, '[') +
                    std::string(100000, ']') + "}");
  for (int i = 0; i < 2; ++i) {
    auto list = RunCli(a.socket(), {"-o", "json", "list"});
    EXPECT_EQ(list.code, 0) << list.out;
    EXPECT_TRUE(absl::StrContains(list.out, "\"good\"")) << list.out;
  }
  auto inspect = RunCli(a.socket(), {"inspect", "bad-format"});
  EXPECT_NE(inspect.code, 0);
  v1::RestoreRequest rr = RestoreReq("bad-container");
  grpc::Status s = a.Restore(rr);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
  // cryod is alive and still checkpoints (with retention, which lists the store).
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "good-2", /*leave_running=*/true)).ok());
  EXPECT_EQ(::kill(a.pid(), 0), 0);
}

}  // namespace
}  // namespace cryo::e2e
