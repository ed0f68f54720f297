// The GPU fast path through cryod, with real CRIU, on machines without a GPU: a job over the fake
// CUDA driver (test/fakes/cuda) runs with libcryo_gpu_fastpath.so preloaded; its device memory
// goes out through the library into the checkpoint's files and comes back at the same addresses.
// (On a GPU machine the same runs against the real driver: e2e/gpu, part fastpath.)

#include "lib/contract/gpu_fastpath.h"

#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "e2e/process/fixture.h"
#include "e2e/process/harness.h"
#include "gtest/gtest.h"
#include "lib/contract/gpu_fastpath_wire.h"
#include "test/http_get_local.h"

#if !defined(FASTPATH_LIB) || !defined(FAKE_CUDA_DIR) || !defined(FAKEGPU_BIN)
#error "FASTPATH_LIB, FAKE_CUDA_DIR and FAKEGPU_BIN must name the built artifacts"
#endif

namespace cryo::e2e {
namespace {

using grpc::StatusCode;
constexpr uint64_t kMiB = 1 << 20;

class FastpathE2e : public ProcessFixture {
 protected:
  // The fake GPU job with the library: 48 MiB of cudaMalloc, 16 MiB mapped as PyTorch's
  // expandable segments map it, two small allocations the driver keeps.
  Workload& GpuJob(std::vector<std::string> extra = {}, const char* binary = FAKEGPU_BIN,
                   std::vector<std::string> env = {}) {
    std::vector<std::string> args = {"--mib", "48", "--chunk-mib", "8", "--vmm-mib", "16"};
    args.insert(args.end(), extra.begin(), extra.end());
    env.push_back(absl::StrCat("LD_PRELOAD=", FASTPATH_LIB));
    env.push_back(absl::StrCat("LD_LIBRARY_PATH=", FAKE_CUDA_DIR));
    auto w = Workload::StartProgram(dir_, binary, args, env);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) std::abort();
    workloads_.push_back(std::move(*w));
    return *workloads_.back();
  }

  // Flips `mask` in the byte at `at` of a checkpoint's first GPU data file of process `pid`, in
  // place: the size stays right, so only the checksum can tell.
  bool DamageGpuFile(const std::string& id, pid_t pid, off_t at, char mask) {
    const std::string f =
        absl::StrCat(store_, "/checkpoints/", id, "/gpu/fastpath-", pid, ".0.bin");
    UniqueFd fd(::open(f.c_str(), O_RDWR | O_CLOEXEC));
    char c = 0;
    if (!fd.ok() || ::pread(fd.get(), &c, 1, at) != 1) return false;
    c ^= mask;
    return ::pwrite(fd.get(), &c, 1, at) == 1;
  }

  static uint64_t U(const nlohmann::json& j, const char* key) {
    return j.is_object() && j.contains(key) ? j[key].get<uint64_t>() : 0;
  }

  // Sum of the sizes of the files under `dir` whose path (relative) starts with `prefix`.
  static uint64_t BytesUnder(const std::string& dir, const std::string& prefix) {
    uint64_t sum = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      std::string rel = std::filesystem::relative(e.path(), dir).string();
      if (absl::StartsWith(rel, prefix)) sum += e.file_size();
    }
    return sum;
  }

  // Checkpoints `w` on `a` (started with HookEnv()) as `id` up to the hook before the dump
  // (drained, the GPU data saved into the staging files) and SIGKILLs cryod there. The job's
  // status as its first record after the drain has it: the reporter thread (not gated) rewrites
  // it every 20 ms, so its "main" is the last step the job took. nullopt when it never got there.
  std::optional<nlohmann::json> KillCryodAfterTheDrain(Cryod& a, Workload& w,
                                                       const std::string& id) {
    HookPoint hp(hook_dir(), "before-dump");
    auto fut = std::async(std::launch::async, [&] { return a.Checkpoint(Req(w.pid(), id)); });
    const bool reached = hp.Reached();
    EXPECT_TRUE(reached) << "the checkpoint never reached the dump";
    nlohmann::json st;
    const bool drained = reached && WaitFor([&] {
                           st = w.Status();
                           return st.is_object() && U(st, "device_used") < 8 * kMiB;
                         });
    EXPECT_TRUE(drained) << "the memory should be out of the GPU: " << st.dump();
    a.Kill9();
    (void)fut.get();
    ::unlink((hook_dir() + "/before-dump.enable").c_str());
    if (!drained) return std::nullopt;
    return st;
  }

  // The job ran on with every word of its memory as its kernels expect it.
  void ExpectRunsOnIntact(Workload& w, uint64_t from_step) {
    ASSERT_TRUE(w.WaitMain(from_step + 30, absl::Seconds(60))) << "job does not run on";
    auto st = w.Status();
    EXPECT_EQ(U(st, "mismatches"), 0u) << st.dump();
    EXPECT_EQ(st["verified"], true) << st.dump();
    EXPECT_EQ(st["api"], "ok") << st.dump();
  }

  // The importer of a sharing job runs: its step count, which reaches the exporter only through
  // the memory they share, advances within 30 s.
  static bool PeerRuns(Workload& w) {
    const uint64_t from = U(w.Status(), "peer_steps");
    const absl::Time end = absl::Now() + absl::Seconds(30);
    while (absl::Now() < end) {
      if (U(w.Status(), "peer_steps") > from + 10) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  void LeaveRunning(Cryod& a, bool in_memory);
  void CheckpointAndRestoreSharing(const std::vector<std::string>& how, const std::string& id);
};

// Two processes of one job sharing 8 MiB the way `how` says (cryo-fakegpu-load's flags): a
// leave-running checkpoint (both go on, still sharing), then a stop and restore. The manifest
// names the importer's export, and after each the importer's count still reaches the exporter
// through the shared memory, no word of it wrong.
void FastpathE2e::CheckpointAndRestoreSharing(const std::vector<std::string>& how,
                                              const std::string& id) {
  Cryod& a = Node("node-a");
  std::vector<std::string> args = {"--share-mib", "8"};
  args.insert(args.end(), how.begin(), how.end());
  Workload& w = GpuJob(args);
  ASSERT_TRUE(w.WaitMain(20));
  ASSERT_TRUE(PeerRuns(w)) << w.Status().dump();

  v1::CheckpointInfo info;
  grpc::Status s = a.Checkpoint(Req(w.pid(), id + "-lr", /*leave_running=*/true), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.gpu_fastpath_bytes(), 72 * kMiB) << "the exporter's 64 MiB and the shared 8";
  ExpectRunsOnIntact(w, U(w.Status(), "main"));
  EXPECT_TRUE(PeerRuns(w)) << w.Status().dump();

  s = a.Checkpoint(Req(w.pid(), id), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto m = nlohmann::json::parse(Slurp(store_ + "/checkpoints/" + id + "/manifest.json"));
  ASSERT_EQ(m["gpu_fastpath"].size(), 2u) << m["gpu_fastpath"].dump();
  int importers = 0;
  for (const auto& f : m["gpu_fastpath"]) {
    if (!f.contains("imports")) continue;
    ++importers;
    ASSERT_EQ(f["imports"].size(), 1u) << f.dump();
    EXPECT_EQ(f["imports"][0]["from"], w.pid()) << "the import is the job's root's export";
  }
  EXPECT_EQ(importers, 1);
  ASSERT_TRUE(WaitGone(w));
  const uint64_t last_step = U(w.Status(), "main");
  s = a.Restore(RestoreReq(id));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunsOnIntact(w, last_step);
  EXPECT_TRUE(PeerRuns(w)) << w.Status().dump();
  EXPECT_EQ(U(w.Status(), "peer_mismatches"), 0u) << w.Status().dump();
}

TEST_F(FastpathE2e, CheckpointAndRestoreMoveTheGpuMemoryThroughTheLibrary) {
  Cryod& a = Node("node-a");
  Workload& w = GpuJob();
  ASSERT_TRUE(w.WaitMain(20));
  const uint64_t used_before = U(w.Status(), "device_used");
  ASSERT_GE(used_before, 64 * kMiB);

  v1::CheckpointInfo info;
  std::vector<v1::Progress> progress;
  grpc::Status s = a.Checkpoint(Req(w.pid(), "fp"), &info, &progress);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.gpu_fastpath_bytes(), 64 * kMiB) << "48 MiB of cudaMalloc + 16 MiB of VMM";
  EXPECT_TRUE(info.stage_ms().count("gpu_drain")) << info.DebugString();
  EXPECT_TRUE(info.stage_ms().count("gpu_save")) << info.DebugString();
  bool drained_reported = false;
  for (const auto& p : progress) {
    if (p.stage() == v1::STAGE_GPU_DRAIN && p.bytes_done() == 64 * kMiB) drained_reported = true;
  }
  EXPECT_TRUE(drained_reported) << "the drain's bytes were never reported";
  ASSERT_TRUE(WaitGone(w));
  const uint64_t last_step = U(w.Status(), "main");

  // The GPU data is in the fast path's files, each with its checksum in the manifest; CRIU's
  // images do not hold it a second time.
  const std::string ckpt = store_ + "/checkpoints/fp";
  auto m = nlohmann::json::parse(Slurp(ckpt + "/manifest.json"));
  ASSERT_TRUE(m["gpu_fastpath"].is_array()) << m.dump(1);
  ASSERT_EQ(m["gpu_fastpath"].size(), 1u);
  EXPECT_EQ(m["gpu_fastpath"][0]["ns_pid"], w.pid());
  uint64_t listed = 0;
  for (const auto& f : m["files"]) {
    if (absl::StartsWith(f["path"].get<std::string>(), "gpu/fastpath-")) listed += U(f, "size");
  }
  EXPECT_EQ(listed, 64 * kMiB);
  EXPECT_EQ(BytesUnder(ckpt, "gpu/"), 64 * kMiB);
  EXPECT_LT(BytesUnder(ckpt, "images/"), 32 * kMiB) << "CRIU dumped the drained memory too";

  v1::RestoreResult res;
  s = a.Restore(RestoreReq("fp"), &res);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(res.root_pid(), w.pid());
  EXPECT_TRUE(res.stage_ms().count("gpu_refill")) << res.DebugString();
  ExpectRunsOnIntact(w, last_step);
  EXPECT_GE(U(w.Status(), "device_used"), 64 * kMiB) << "the memory is back on the (fake) GPU";
}

// A job checkpoint of two GPU members on two nodes (issue 37): node-a's cryod drives, node-b's
// takes its member; both members' GPU memory leaves through the fast path at one cut (the GPU
// cut's rounds over the Peer stream), leave-running and then at a stop, and the two parts,
// restored together, run on with every word of their memory.
TEST_F(FastpathE2e, AJobsGpuMembersOnTwoNodesLeaveTheirGpusAtOneCutAndResumeTogether) {
  auto [ap, bp] = TwoNodes();
  Cryod& a = *ap;
  Cryod& b = *bp;
  Workload& r0 = GpuJob();
  Workload& r1 = GpuJob();
  ASSERT_TRUE(r0.WaitMain(20));
  ASSERT_TRUE(r1.WaitMain(20));
  auto job = [&](const std::string& id, bool leave_running) {
    v1::CheckpointJobRequest r;
    r.set_namespace_("e2e");
    r.set_job("gpus");
    r.set_job_checkpoint_id(id);
    for (auto [name, w, node] :
         {std::tuple<const char*, Workload*, const char*>{"0", &r0, ""}, {"1", &r1, "node-b"}}) {
      v1::JobMember* m = r.add_members();
      m->set_member(name);
      m->set_node(node);
      *m->mutable_checkpoint() = Req(w->pid(), "", leave_running);
      m->mutable_checkpoint()->set_workload(std::string("e2e.gpus.") + name);
    }
    return r;
  };
  v1::JobCheckpointInfo info;
  grpc::Status s = a.CheckpointJob(job("g1", true), &info);
  ASSERT_TRUE(s.ok()) << s.error_message() << "\nnode-a:\n"
                      << Slurp(a.log()) << "\nnode-b:\n"
                      << Slurp(b.log());
  ASSERT_EQ(info.parts_size(), 2);
  for (const auto& p : info.parts()) {
    EXPECT_EQ(p.gpu_fastpath_bytes(), 64 * kMiB) << p.checkpoint_id();
  }
  // Each node's member was held at the cut with the other node's before its memory moved.
  for (Cryod* n : {&a, &b}) {
    EXPECT_NE(Slurp(n->log()).find("held at one cut with the job's other members"),
              std::string::npos)
        << n->log();
  }
  ExpectRunsOnIntact(r0, U(r0.Status(), "main"));
  ExpectRunsOnIntact(r1, U(r1.Status(), "main"));

  // At a stop: both leave; restored together on node-b from the shared store.
  s = a.CheckpointJob(job("g2", false), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  for (Workload* w : {&r0, &r1}) ASSERT_TRUE(WaitGone(*w));
  const uint64_t at0 = U(r0.Status(), "main"), at1 = U(r1.Status(), "main");
  v1::RestoreJobRequest rj;
  rj.set_namespace_("e2e");
  rj.set_job("gpus");
  rj.set_job_checkpoint_id("g2");
  rj.set_pid_wait_timeout_ms(10000);
  s = b.RestoreJob(rj);
  ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << Slurp(b.log());
  ExpectRunsOnIntact(r0, at0);
  ExpectRunsOnIntact(r1, at1);
}

// A crafted driver (the nodes' certificate and token, but not keeping to the GPU cut's rounds:
// its answer names another round) is refused by node-b: its member's checkpoint fails naming the
// round, nothing is published, and the member runs on with every word of its memory.
TEST_F(FastpathE2e, ADriverAnsweringAnotherRoundOfTheGpuCutIsRefusedAndTheMemberRunsOn) {
  auto [ap, bp] = TwoNodes();
  Cryod& b = *bp;
  Workload& w = GpuJob();
  ASSERT_TRUE(w.WaitMain(20));
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = Slurp(tls_dir_ + "/ca.crt");
  tls.pem_private_key = Slurp(tls_dir_ + "/tls.key");
  tls.pem_cert_chain = Slurp(tls_dir_ + "/tls.crt");
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("cryo-peer");
  auto stub = v1::Peer::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(peer_port_b_), grpc::SslCredentials(tls), args));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer peer-token-of-the-e2e-cluster");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub->JoinJobCheckpoint(&ctx);
  v1::PeerCutMessage start;
  v1::CheckpointJobRequest* r = start.mutable_start();
  r->set_namespace_("e2e");
  r->set_job("gpus");
  r->set_job_checkpoint_id("crafted");
  v1::JobMember* m = r->add_members();
  m->set_member("1");
  m->set_node("node-b");
  *m->mutable_checkpoint() = Req(w.pid(), "", /*leave_running=*/true);
  ASSERT_TRUE(stream->Write(start));
  v1::PeerCutReply reply;
  ASSERT_TRUE(stream->Read(&reply));
  ASSERT_TRUE(reply.has_gpu_round()) << reply.DebugString();
  EXPECT_EQ(reply.gpu_round().round(), 0u);
  v1::PeerCutMessage wrong;
  wrong.mutable_gpu_round()->set_round(5);
  ASSERT_TRUE(stream->Write(wrong));
  std::string failed;
  while (failed.empty() && stream->Read(&reply)) {
    if (reply.has_failed()) failed = reply.failed();
    ASSERT_FALSE(reply.has_done()) << reply.DebugString();
  }
  stream->WritesDone();
  while (stream->Read(&reply)) {  // (its last word; Finish waits for every one to be read)
    ASSERT_FALSE(reply.has_done()) << reply.DebugString();
  }
  (void)stream->Finish();  // (the node's answer is in the stream; its end says nothing more)
  EXPECT_NE(failed.find("did not answer round 0 of the GPU cut"), std::string::npos)
      << failed << "\n"
      << Slurp(b.log());
  for (const auto& c : b.List()) EXPECT_NE(c.job_checkpoint(), "crafted") << c.checkpoint_id();
  ExpectRunsOnIntact(w, U(w.Status(), "main"));
}

// By default the data goes into cryod's memory, the job gets it back from there, and cryod
// writes the files while the job runs on (gpu_write); with gpu_fast_path_in_memory off it goes
// through the files before the job runs on. Both leave a checkpoint that restores.
TEST_F(FastpathE2e, ALeaveRunningCheckpointGivesTheJobItsMemoryBack) {
  LeaveRunning(Node("node-a"), true);
}

TEST_F(FastpathE2e, ALeaveRunningCheckpointThroughFilesGivesTheJobItsMemoryBack) {
  LeaveRunning(Node("node-a", {"--gpu-fast-path-in-memory", "false"}), false);
}

void FastpathE2e::LeaveRunning(Cryod& a, bool in_memory) {
  Workload& w = GpuJob();
  ASSERT_TRUE(w.WaitMain(20));
  v1::CheckpointInfo info;
  grpc::Status s = a.Checkpoint(Req(w.pid(), "fp-lr", /*leave_running=*/true), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.gpu_fastpath_bytes(), 64 * kMiB);
  EXPECT_TRUE(info.stage_ms().count("gpu_refill")) << info.DebugString();
  EXPECT_EQ(info.stage_ms().count("gpu_write"), in_memory ? 1u : 0u) << info.DebugString();
  ExpectRunsOnIntact(w, U(w.Status(), "main"));
  // The files hold the data (listed with their checksums), CRIU's images do not.
  const std::string ckpt = store_ + "/checkpoints/fp-lr";
  EXPECT_EQ(BytesUnder(ckpt, "gpu/"), 64 * kMiB);
  EXPECT_LT(BytesUnder(ckpt, "images/"), 32 * kMiB) << "CRIU dumped the GPU data too";
  // And the checkpoint it left restores, once the job is gone.
  w.Kill();
  ASSERT_TRUE(WaitGone(w));
  s = a.Restore(RestoreReq("fp-lr"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunsOnIntact(w, 0);
}

// gpu_park (gpu_fastpath.h, "Parking"): a leave-running checkpoint parks the job's GPU data in
// memory that cryod's parking process holds (cryo-gpu-parker, over the fake driver too, whose
// "GPU memory" is a memfd both processes map), gives it back from there, and after the thaw has
// the parking process copy it into cryod's memory, which the files are written from. The job runs
// on intact, and the checkpoint restores it with every word as its kernels expect.
TEST_F(FastpathE2e, AParkedLeaveRunningCheckpointIsWrittenFromTheParkAndRestores) {
  Cryod& a = Node("node-a", {"--gpu-park", "true", "--gpu-parker-libcuda",
                             absl::StrCat(FAKE_CUDA_DIR, "/libcuda.so.1")});
  Workload& w = GpuJob();
  ASSERT_TRUE(w.WaitMain(20));
  v1::CheckpointInfo info;
  grpc::Status s = a.Checkpoint(Req(w.pid(), "fp-park", /*leave_running=*/true), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.gpu_fastpath_bytes(), 64 * kMiB);
  const std::string log = Slurp(a.log());
  EXPECT_TRUE(absl::StrContains(log, "1 of 1 processes have a park on their GPU")) << log;
  EXPECT_TRUE(absl::StrContains(log, ", parked on its GPU")) << log;
  EXPECT_TRUE(absl::StrContains(log, ", from its park on the GPU")) << log;
  EXPECT_TRUE(absl::StrContains(log, "bytes copied into cryod's memory in")) << log;
  ExpectRunsOnIntact(w, U(w.Status(), "main"));
  const std::string ckpt = store_ + "/checkpoints/fp-park";
  EXPECT_EQ(BytesUnder(ckpt, "gpu/"), 64 * kMiB);
  w.Kill();
  ASSERT_TRUE(WaitGone(w));
  s = a.Restore(RestoreReq("fp-park"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunsOnIntact(w, 0);
}

// gpu_restore_into_gpu (gpu_fastpath.h, "Filled"): the restore has cryod's parking process read
// the fast path's files into GPU memory while CRIU restores the job, checks each file against
// the checkpoint's checksum, and the library copies the data from there within the GPU. The job
// runs on with every word; a file damaged in place is refused and the job never runs on it.
TEST_F(FastpathE2e, ARestoreReadsTheGpuDataIntoGpuMemoryFirstAndRefusesADamagedFile) {
  Cryod& a = Node("node-a", {"--gpu-restore-into-gpu", "true", "--gpu-parker-libcuda",
                             absl::StrCat(FAKE_CUDA_DIR, "/libcuda.so.1")});
  Workload& w = GpuJob();
  ASSERT_TRUE(w.WaitMain(20));
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "fp-fill")).ok());
  ASSERT_TRUE(WaitGone(w));
  const uint64_t last = U(w.Status(), "main");
  // The GPU the data was on is recorded: the restore reads onto it.
  auto m = nlohmann::json::parse(Slurp(store_ + "/checkpoints/fp-fill/manifest.json"));
  ASSERT_EQ(m["gpu_fastpath"].size(), 1u) << m.dump(1);
  EXPECT_FALSE(m["gpu_fastpath"][0].value("device", "").empty()) << m.dump(1);

  grpc::Status s = a.Restore(RestoreReq("fp-fill"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  std::string log = Slurp(a.log());
  EXPECT_TRUE(absl::StrContains(log, "bytes of GPU data of pid")) << log;
  EXPECT_TRUE(absl::StrContains(log, ", from the GPU memory cryod read it into")) << log;
  ExpectRunsOnIntact(w, last);

  // Again, with one bit of a file flipped in place (its size right).
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "fp-fill-bad")).ok());
  ASSERT_TRUE(WaitGone(w));
  const uint64_t last2 = U(w.Status(), "main");
  ASSERT_TRUE(DamageGpuFile("fp-fill-bad", w.pid(), 3 << 20, 1));
  s = a.Restore(RestoreReq("fp-fill-bad"));
  EXPECT_EQ(s.error_code(), StatusCode::DATA_LOSS) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "does not hold what the checkpoint recorded"))
      << s.error_message();
  EXPECT_TRUE(WaitGone(w)) << "the restored job must not run on data that is not its own";
  EXPECT_LE(U(w.Status(), "main"), last2 + 1) << "the job took steps after the failed restore";
  log = Slurp(a.log());
  EXPECT_EQ(log.find(", from the GPU memory cryod read it into"),
            log.rfind(", from the GPU memory cryod read it into"))
      << "the damaged checkpoint's data reached the job";
}

// The same for a job of two processes that share memory as NCCL's P2P transport does, each with
// memory of its own: a park each, started at once (a parking process must outlive the thread that
// starts it), the shared allocation parked by its exporter. Both run on with every word, the
// peer's own memory and the shared memory included.
TEST_F(FastpathE2e, TwoProcessesOfAJobAreParkedAtOnceAndRunOnIntact) {
  Cryod& a = Node("node-a", {"--gpu-park", "true", "--gpu-parker-libcuda",
                             absl::StrCat(FAKE_CUDA_DIR, "/libcuda.so.1")});
  Workload& w = GpuJob({"--share-mib", "8", "--peer-mib", "16"});
  ASSERT_TRUE(w.WaitMain(20));
  ASSERT_TRUE(PeerRuns(w)) << w.Status().dump();
  const std::string peer_status = w.status_path() + ".peer";
  auto peer = [&] { return nlohmann::json::parse(Slurp(peer_status), nullptr, false); };
  const uint64_t peer_main = U(peer(), "main");
  v1::CheckpointInfo info;
  grpc::Status s = a.Checkpoint(Req(w.pid(), "fp-park-two", /*leave_running=*/true), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.gpu_fastpath_bytes(), 88 * kMiB) << "64 + the shared 8, and the peer's 16";
  const std::string log = Slurp(a.log());
  EXPECT_TRUE(absl::StrContains(log, "2 of 2 processes have a park on their GPU")) << log;
  ExpectRunsOnIntact(w, U(w.Status(), "main"));
  EXPECT_TRUE(PeerRuns(w)) << w.Status().dump();
  EXPECT_EQ(U(w.Status(), "peer_mismatches"), 0u) << w.Status().dump();
  ASSERT_TRUE(WaitFor([&] { return U(peer(), "main") > peer_main + 30; })) << Slurp(peer_status);
  EXPECT_EQ(U(peer(), "mismatches"), 0u) << Slurp(peer_status);
  EXPECT_EQ(peer()["verified"], true) << Slurp(peer_status);
}

// A leave-running checkpoint copies the private memory of a process under the library while the
// job runs (the library gives cryod a userfaultfd that tracks the job's writes: criu/pre_copy.h),
// and the freeze copies again only what the job wrote since; the rest goes into the images after
// the thaw. The job rewrites its 64 MiB of host memory all along, so both kinds are there. Its
// stamps, in shared memory, are copied ahead too, after the drain. Then the job is restored from
// that checkpoint, and every page of its host memory is the one its stamp says it wrote last: a
// page (or a stamp) taken from the copy ahead that the job had written since would not match.
TEST_F(FastpathE2e, ALeaveRunningCheckpointCopiesHostMemoryAheadAndTheRestoreHasEveryWrite) {
  Cryod& a = Node("node-a");
  Workload& w = GpuJob({"--host-mib", "64"});
  ASSERT_TRUE(w.WaitMain(20));
  ASSERT_TRUE(WaitFor([&] { return U(w.Status(), "host_cycles") >= 1; })) << w.Status().dump();
  v1::CheckpointInfo info;
  grpc::Status s = a.Checkpoint(Req(w.pid(), "fp-ahead", /*leave_running=*/true), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string log = Slurp(a.log());
  // How much went which way: cryod's log lines for this checkpoint.
  auto number_before = [&](const std::string& text) -> uint64_t {
    const size_t at = log.find(text);
    if (at == std::string::npos) return 0;
    size_t b = log.rfind(": ", at);
    uint64_t v = 0;
    return b != std::string::npos && absl::SimpleAtoi(log.substr(b + 2, at - b - 2), &v) ? v : 0;
  };
  const uint64_t ahead = number_before(" bytes of private memory of 1 process(es) copied ahead");
  const uint64_t taken = number_before(" bytes taken from the copy ahead of the freeze");
  const uint64_t frozen = number_before(" bytes of anonymous memory (");
  // The stamps' shared memory too, after the drain (pre_copy.h).
  const uint64_t shared = number_before(" bytes of shared memory (1 segment(s)) copied ahead");
  EXPECT_GE(ahead, 64 * kMiB) << log;
  EXPECT_GT(taken, 0u) << log;
  EXPECT_GT(shared, 0u) << log;
  EXPECT_LE(taken, ahead + shared) << log;
  EXPECT_GT(frozen, 0u) << "the pages the job wrote since, at least, are copied frozen\n" << log;
  ExpectRunsOnIntact(w, U(w.Status(), "main"));
  EXPECT_EQ(U(w.Status(), "host_mismatches"), 0u) << w.Status().dump();

  // A second one writes its pages images over the first's, kept for it (dump_pages_pool_mib,
  // on in the e2e's cryods); the job is restored from that one.
  s = a.Checkpoint(Req(w.pid(), "fp-ahead-2", /*leave_running=*/true), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string log2 = Slurp(a.log());
  const size_t second = log2.find("checkpoint fp-ahead-2: ");
  ASSERT_NE(second, std::string::npos) << log2;
  const size_t over = log2.find(" pages image(s) written over ", second);
  ASSERT_NE(over, std::string::npos) << log2;
  const size_t count_at = log2.rfind("; ", over);
  int pooled = 0;
  ASSERT_TRUE(absl::SimpleAtoi(log2.substr(count_at + 2, over - count_at - 2), &pooled)) << log2;
  EXPECT_GE(pooled, 1) << log2;

  w.Kill();
  ASSERT_TRUE(WaitGone(w));
  s = a.Restore(RestoreReq("fp-ahead-2"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunsOnIntact(w, 0);
  // Two whole passes over the host memory after the restore: every page checked.
  const uint64_t cycles = U(w.Status(), "host_cycles");
  ASSERT_TRUE(WaitFor([&] { return U(w.Status(), "host_cycles") >= cycles + 2; }))
      << w.Status().dump();
  EXPECT_EQ(U(w.Status(), "host_mismatches"), 0u) << w.Status().dump();
}

// With staging memory held ready (gpu_staging_mib), a stop checkpoint drains into cryod's
// memory too (the GPUs of a node then vacate at memory speed) and cryod writes the files; the
// job restored from it runs on with every word of its memory. A job larger than a slot goes
// through files as before.
TEST_F(FastpathE2e, AStopCheckpointDrainsIntoTheStagingMemoryAndRestoresIntact) {
  Cryod& a =
      Node("node-a",
           {"--gpu-staging-mib", "64", "--gpu-staging-slots", "1", "--gpu-write-start", "draining"},
           HookEnv());
  // cryod's log says how many slots are ready after each change.
  auto slot_ready = [&] {
    const std::string log = Slurp(a.log());
    const size_t at = log.rfind(" of 1 ready)");
    return at != std::string::npos && at >= 2 && log.compare(at - 2, 2, "(1") == 0;
  };
  ASSERT_TRUE(WaitFor(slot_ready)) << Slurp(a.log());
  EXPECT_TRUE(absl::StrContains(HttpGetLocal(a.metrics_port(), "/metrics"),
                                "cryo_gpu_staging_slots{state=\"ready\"} 1"));
  Workload& w = GpuJob();
  ASSERT_TRUE(w.WaitMain(20));

  // Cancelled after the drain, while cryod writes the files from its memory: the write ends,
  // the job gets its memory back from the slot and runs on, and the slot is ready again.
  {
    HookPoint hp(hook_dir(), "before-dump");
    v1::CheckpointRequest req = Req(w.pid(), "fp-staged-cancel");
    req.set_operation_id("fp-staged-cancel-me");
    auto fut = std::async(std::launch::async, [&] { return a.Checkpoint(req); });
    ASSERT_TRUE(hp.Reached());
    EXPECT_EQ(RunCli(a.socket(), {"cancel", "fp-staged-cancel-me"}).code, 0);
    hp.Release();
    EXPECT_EQ(fut.get().error_code(), StatusCode::CANCELLED);
    EXPECT_TRUE(absl::StrContains(Slurp(a.log()), "a drain took a slot"));
    ExpectRunsOnIntact(w, U(w.Status(), "main"));
    EXPECT_TRUE(EmptyDir(store_ + "/.staging"));
    ::unlink((hook_dir() + "/before-dump.enable").c_str());
    ASSERT_TRUE(WaitFor(slot_ready)) << Slurp(a.log());
  }

  v1::CheckpointInfo info;
  std::vector<v1::Progress> progress;
  grpc::Status s = a.Checkpoint(Req(w.pid(), "fp-staged"), &info, &progress);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.gpu_fastpath_bytes(), 64 * kMiB);
  EXPECT_EQ(info.stage_ms().count("gpu_write"), 1u) << info.DebugString();
  bool staged = false;
  for (const auto& p : progress) {
    if (p.stage() == v1::STAGE_GPU_HOST_COPY &&
        absl::StrContains(p.message(), "1 of 1 processes into staging memory")) {
      staged = true;
    }
  }
  EXPECT_TRUE(staged) << "the drain did not go into the staging memory";
  EXPECT_TRUE(absl::StrContains(Slurp(a.log()),
                                "checkpoint fp-staged: its GPU data is written behind the drain"))
      << "this tree's library follows: the write begins with the drain";
  const std::string ckpt = store_ + "/checkpoints/fp-staged";
  EXPECT_EQ(BytesUnder(ckpt, "gpu/"), 64 * kMiB);
  EXPECT_LT(BytesUnder(ckpt, "images/"), 32 * kMiB) << "CRIU dumped the GPU data too";
  ASSERT_TRUE(WaitGone(w));
  uint64_t last_step = U(w.Status(), "main");
  // The restore reads the GPU data into the slot while CRIU restores, and refills from it.
  // Started at once: the slot the checkpoint gave back may still be being zeroed, and the
  // restore waits for it rather than reading through the library.
  s = a.Restore(RestoreReq("fp-staged"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunsOnIntact(w, last_step);
  // The library (this tree's, so one that follows) copied behind cryod's read.
  EXPECT_TRUE(absl::StrContains(
      Slurp(a.log()), absl::StrCat(64 * kMiB, " bytes of GPU data read into staging memory")))
      << Slurp(a.log());
  EXPECT_TRUE(absl::StrContains(Slurp(a.log()), "the libraries copying behind it"));
  EXPECT_TRUE(absl::StrContains(Slurp(a.log()), "as cryod read it from the store"));

  // Read ahead, a damaged file is refused before any of it reaches the job.
  ASSERT_TRUE(WaitFor(slot_ready)) << Slurp(a.log());
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "fp-staged-bad")).ok());
  ASSERT_TRUE(WaitGone(w));
  last_step = U(w.Status(), "main");
  ASSERT_TRUE(DamageGpuFile("fp-staged-bad", w.pid(), 5 << 20, 4));
  ASSERT_TRUE(WaitFor(slot_ready)) << Slurp(a.log());
  s = a.Restore(RestoreReq("fp-staged-bad"));
  EXPECT_EQ(s.error_code(), StatusCode::DATA_LOSS) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "does not hold what the checkpoint recorded"))
      << s.error_message();
  EXPECT_TRUE(WaitGone(w)) << "the restored job must not run on data that is not its own";
  EXPECT_LE(U(w.Status(), "main"), last_step + 1) << "the job took steps after the failed restore";
  ASSERT_TRUE(WaitFor(slot_ready)) << "the slot comes back after a refused read";

  // 80 MiB of GPU data: more than the slot holds.
  Workload& big = GpuJob({"--mib", "64"});
  ASSERT_TRUE(big.WaitMain(20));
  s = a.Checkpoint(Req(big.pid(), "fp-unstaged"), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.gpu_fastpath_bytes(), 80 * kMiB);
  EXPECT_EQ(info.stage_ms().count("gpu_write"), 0u) << info.DebugString();
  EXPECT_TRUE(absl::StrContains(Slurp(a.log()), "no ready slot for every process"));
  ASSERT_TRUE(WaitGone(big));
  // No slot holds it: the library reads the files, as without staging memory.
  s = a.Restore(RestoreReq("fp-unstaged"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunsOnIntact(big, 0);
  EXPECT_TRUE(absl::StrContains(Slurp(a.log()), "the library reads the GPU data from the store"));
}

// By default (gpu_write_start "drained") a stop checkpoint's write from staging memory begins
// once the drain is done, not with it; with "checkpointed" (node-b) after the driver's
// checkpoint. Each restored, the job runs on intact.
TEST_F(FastpathE2e, AStopCheckpointIntoStagingMemoryWritesFromTheDrainsEndByDefault) {
  Cryod& a = Node("node-a", {"--gpu-staging-mib", "64", "--gpu-staging-slots", "1"});
  Cryod& b = Node("node-b", {"--gpu-staging-mib", "64", "--gpu-staging-slots", "1",
                             "--gpu-write-start", "checkpointed"});
  for (Cryod* n : {&a, &b}) {
    auto slot_ready = [&] { return absl::StrContains(Slurp(n->log()), "(1 of 1 ready)"); };
    ASSERT_TRUE(WaitFor(slot_ready)) << Slurp(n->log());
  }
  Workload& w = GpuJob();
  ASSERT_TRUE(w.WaitMain(20));
  for (Cryod* n : {&a, &b}) {
    const std::string id = n == &a ? "fp-drained" : "fp-after";
    v1::CheckpointInfo info;
    grpc::Status s = n->Checkpoint(Req(w.pid(), id), &info);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(info.stage_ms().count("gpu_write"), 1u) << info.DebugString();
    const std::string log = Slurp(n->log());
    EXPECT_TRUE(absl::StrContains(log, "a drain took a slot")) << log;
    EXPECT_FALSE(absl::StrContains(log, "written behind the drain")) << log;
    EXPECT_EQ(absl::StrContains(log, "written from the drain's end"), n == &a) << log;
    ASSERT_TRUE(WaitGone(w));
    const uint64_t last_step = U(w.Status(), "main");
    s = n->Restore(RestoreReq(id));
    ASSERT_TRUE(s.ok()) << s.error_message();
    ExpectRunsOnIntact(w, last_step);
  }
}

// Incremental GPU data: a job with 128 MiB of weights it never writes (two whole 64 MiB units at
// the front of its stream) and 64 MiB it rewrites every step. Its second leave-running
// checkpoint writes only what changed and refers to the first for the weights; restored from
// it, every word is where the job expects it. The first stays while the second refers to it.
TEST_F(FastpathE2e, ASecondCheckpointWritesOnlyTheGpuDataThatChanged) {
  Cryod& a = Node("node-a");
  Workload& w = GpuJob({"--static-mib", "128"});
  ASSERT_TRUE(w.WaitMain(20));
  v1::CheckpointInfo first, second;
  grpc::Status s = a.Checkpoint(Req(w.pid(), "inc-1", /*leave_running=*/true), &first);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(first.gpu_fastpath_bytes(), 192 * kMiB);
  EXPECT_EQ(first.referenced_bytes(), 0u);
  ASSERT_TRUE(w.WaitMain(U(w.Status(), "main") + 20));
  s = a.Checkpoint(Req(w.pid(), "inc-2", /*leave_running=*/true), &second);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(second.referenced_bytes(), 128 * kMiB) << "the weights, referred to";
  // On disk: only the changed 64 MiB (the files' sizes still say 192 MiB).
  const std::string ckpt = store_ + "/checkpoints/inc-2";
  EXPECT_EQ(BytesUnder(ckpt, "gpu/"), 192 * kMiB);
  uint64_t allocated = 0;
  for (const auto& e : std::filesystem::directory_iterator(ckpt + "/gpu")) {
    struct stat st;
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    allocated += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  EXPECT_LE(allocated, 65 * kMiB) << "the weights were written again";
  auto m = nlohmann::json::parse(Slurp(ckpt + "/manifest.json"));
  EXPECT_EQ(U(m, "bytes_referenced"), 128 * kMiB);
  // Kept while inc-2 refers to it.
  v1::DeleteCheckpointRequest dreq;
  dreq.set_checkpoint_id("inc-1");
  v1::DeleteCheckpointResponse dresp;
  grpc::ClientContext ctx;
  grpc::Status del = a.stub().DeleteCheckpoint(&ctx, dreq, &dresp);
  EXPECT_EQ(del.error_code(), StatusCode::FAILED_PRECONDITION) << del.error_message();
  EXPECT_NE(del.error_message().find("inc-2"), std::string::npos) << del.error_message();
  ExpectRunsOnIntact(w, U(w.Status(), "main"));

  // Restored from inc-2: the weights come through inc-1's files, checked chunk by chunk.
  w.Kill();
  ASSERT_TRUE(WaitGone(w));
  v1::RestoreResult res;
  s = a.Restore(RestoreReq("inc-2"), &res);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunsOnIntact(w, 0);
}

// Two processes of one job sharing GPU memory as NCCL's P2P transport does (an export as a
// POSIX descriptor, imported and mapped by the other process): the exporter moves it, the
// importer maps the exporter's new memory again after each refill. The importer writes its step
// count into the shared memory and the exporter reads it back: it goes on only while both map the
// same memory.
TEST_F(FastpathE2e, TwoProcessesSharingGpuMemoryAreCheckpointedAndRestoredTogether) {
  CheckpointAndRestoreSharing({}, "share");
}

// Legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle) of a cudaMalloc, as PyTorch shares
// CUDA tensors between processes and NCCL's P2P transport shares buffers with
// NCCL_CUMEM_ENABLE=0: the library makes the handle and serves the memory to the process that
// opens it, and both are checkpointed and restored sharing it.
TEST_F(FastpathE2e, TwoProcessesSharingACudaMallocByLegacyIpcAreCheckpointedAndRestored) {
  CheckpointAndRestoreSharing({"--share-ipc"}, "ipc");
}

// NCCL's SHM transport (P2P unavailable) shares host memory made with cuMemCreate as POSIX
// descriptors; the driver cannot restore that between processes, so the library moves it.
TEST_F(FastpathE2e, TwoProcessesSharingHostMemoryAsNcclsShmTransportDoesAreRestored) {
  CheckpointAndRestoreSharing({"--share-host"}, "shm");
}

TEST_F(FastpathE2e, AProgramLinkedAgainstTheDriverIsServedToo) {
  Cryod& a = Node("node-a");
  Workload& w = GpuJob({}, FAKEGPU_DIRECT_BIN);
  ASSERT_TRUE(w.WaitMain(20));
  v1::CheckpointInfo info;
  grpc::Status s = a.Checkpoint(Req(w.pid(), "fp-direct"), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.gpu_fastpath_bytes(), 64 * kMiB);
  ASSERT_TRUE(WaitGone(w));
  const uint64_t last = U(w.Status(), "main");
  s = a.Restore(RestoreReq("fp-direct"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunsOnIntact(w, last);
}

TEST_F(FastpathE2e, ADamagedFastPathFileIsRefusedAndTheJobNeverRunsOnIt) {
  Cryod& a = Node("node-a");
  Workload& w = GpuJob();
  ASSERT_TRUE(w.WaitMain(20));
  ASSERT_TRUE(a.Checkpoint(Req(w.pid(), "fp-bad")).ok());
  ASSERT_TRUE(WaitGone(w));
  const uint64_t last = U(w.Status(), "main");
  // One bit of the GPU data flipped in place: the size is right, the restore's size check passes.
  ASSERT_TRUE(DamageGpuFile("fp-bad", w.pid(), 3 << 20, 1));

  grpc::Status s = a.Restore(RestoreReq("fp-bad"));
  EXPECT_EQ(s.error_code(), StatusCode::DATA_LOSS) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "does not hold what the checkpoint recorded"))
      << s.error_message();
  EXPECT_TRUE(WaitGone(w)) << "the restored job must not run on data that is not its own";
  // The record the dumped job left may lag its last step by one (written every 20 ms by another
  // thread); a job let run on the damaged data takes a step every millisecond.
  EXPECT_LE(U(w.Status(), "main"), last + 1) << "the job took steps after the failed restore";
  auto list = a.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_FALSE(list[0].damaged().empty()) << "resume: auto must pass over it next time";
}

// NCCL exports one allocation per buffer, 48 a rank for one communicator on two H200s: with two
// process groups a rank imported more than one message of the channel carries descriptors
// (kMaxFiles), and the restore failed there (run 46, "Message too long"). The restore brings
// them in several messages now, and both processes run on sharing all of it.
TEST_F(FastpathE2e, AProcessImportingMoreAllocationsThanOneMessageCarriesIsRestored) {
  Cryod& a = Node("node-a");
  const int count = contract::gpu_fastpath::kMaxFiles + 6;
  Workload& w = GpuJob({"--share-mib", "2", "--share-count", std::to_string(count)});
  ASSERT_TRUE(w.WaitMain(20));
  ASSERT_TRUE(PeerRuns(w)) << w.Status().dump();
  v1::CheckpointInfo info;
  grpc::Status s = a.Checkpoint(Req(w.pid(), "many"), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto m = nlohmann::json::parse(Slurp(store_ + "/checkpoints/many/manifest.json"));
  size_t imports = 0;
  for (const auto& f : m["gpu_fastpath"]) {
    if (f.contains("imports")) imports += f["imports"].size();
  }
  EXPECT_EQ(imports, static_cast<size_t>(count));
  ASSERT_TRUE(WaitGone(w));
  const uint64_t last_step = U(w.Status(), "main");
  v1::RestoreResult res;
  s = a.Restore(RestoreReq("many"), &res);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunsOnIntact(w, last_step);
  EXPECT_TRUE(PeerRuns(w)) << "the importer does not run on: " << w.Status().dump();
  EXPECT_EQ(U(w.Status(), "peer_mismatches"), 0u) << w.Status().dump();
}

// libuv (PyTorch's TCPStore, every torchrun agent) sets up an io_uring when it can, which CRIU
// cannot checkpoint; under the library io_uring_setup fails as on a kernel without it, the job
// goes on without a ring and is checkpointed and restored whole.
TEST_F(FastpathE2e, AJobUnderTheLibraryGetsNoIoUringAndIsCheckpointedWhole) {
  std::string why;
  if (!KernelGivesIoUring(&why)) GTEST_SKIP() << "this kernel refuses io_uring_setup: " << why;
  Cryod& a = Node("node-a");
  Workload& w = GpuJob({"--io-uring"});
  ASSERT_TRUE(w.WaitMain(20));
  EXPECT_EQ(w.Status()["io_uring"], "none") << w.Status().dump();
  v1::CheckpointInfo info;
  grpc::Status s = a.Checkpoint(Req(w.pid(), "fp-uring"), &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(WaitGone(w));
  const uint64_t last_step = U(w.Status(), "main");
  v1::RestoreResult res;
  s = a.Restore(RestoreReq("fp-uring"), &res);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunsOnIntact(w, last_step);
}

// With CRYO_GPU_FASTPATH_IO_URING=1 the job keeps its ring, and cryod refuses it before the GPU
// is drained, naming the process and the setting; the job runs on with its memory intact.
TEST_F(FastpathE2e, AJobAllowedItsIoUringIsRefusedNamingTheSetting) {
  std::string why;
  if (!KernelGivesIoUring(&why)) GTEST_SKIP() << "this kernel refuses io_uring_setup: " << why;
  Cryod& a = Node("node-a");
  Workload& w = GpuJob({"--io-uring"}, FAKEGPU_BIN,
                       {absl::StrCat(contract::gpu_fastpath::kEnvIoUring, "=1")});
  ASSERT_TRUE(w.WaitMain(20));
  ASSERT_EQ(w.Status()["io_uring"], "ring") << w.Status().dump();
  grpc::Status s = a.Checkpoint(Req(w.pid(), "fp-uring"));
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "io_uring")) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), contract::gpu_fastpath::kEnvIoUring))
      << s.error_message();
  EXPECT_TRUE(a.List().empty());
  ExpectRunsOnIntact(w, U(w.Status(), "main"));
}

TEST_F(FastpathE2e, GpuWorkThatDoesNotStopInTimeFailsTheCheckpointAndTheJobRunsOn) {
  Cryod& a = Node("node-a");
  // Every kernel runs 1.5 s: the drain cannot quiesce within a 300 ms bound.
  Workload& w = GpuJob({"--kernel-ms", "1500"});
  ASSERT_TRUE(w.WaitMain(2, absl::Seconds(30)));
  v1::CheckpointRequest req = Req(w.pid(), "fp-slow");
  req.set_gpu_lock_timeout_ms(300);
  grpc::Status s = a.Checkpoint(req);
  EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "still in flight")) << s.error_message();
  EXPECT_TRUE(a.List().empty());
  EXPECT_TRUE(EmptyDir(store_ + "/.staging"));
  const uint64_t now = U(w.Status(), "main");
  ASSERT_TRUE(w.WaitMain(now + 2, absl::Seconds(30))) << "the job does not run on";
  EXPECT_EQ(w.Status()["verified"], true);
}

TEST_F(FastpathE2e, CryodKilledAfterTheDrainGivesTheMemoryBackWhenItRestarts) {
  Cryod* a = &Node("node-a", {}, HookEnv());
  Workload& w = GpuJob();
  ASSERT_TRUE(w.WaitMain(20));
  std::optional<nlohmann::json> st = KillCryodAfterTheDrain(*a, w, "fp-crash");
  ASSERT_TRUE(st);
  const uint64_t held = U(*st, "main");
  // The job waits at the library's gate meanwhile: no step on memory that is not there.
  ::usleep(200 * 1000);
  EXPECT_EQ(U(w.Status(), "main"), held);
  Node("node-a");  // recovery refills from the staging files, then removes them
  ExpectRunsOnIntact(w, held);
  // (Recovery runs once cryod serves: the staging directory goes when it is done.)
  EXPECT_TRUE(WaitFor([&] { return EmptyDir(store_ + "/.staging"); }));
}

// A leave-running checkpoint whose data is only in cryod's memory when cryod dies: that data is
// gone, so recovery ends the job (its replacement resumes from the newest good checkpoint)
// rather than leave it held forever at its gate, and publishes nothing.
TEST_F(FastpathE2e, CryodKilledWhileOnlyItsMemoryHoldsTheGpuDataEndsTheJob) {
  Cryod* a = &Node("node-a", {}, HookEnv());
  Workload& w = GpuJob();
  ASSERT_TRUE(w.WaitMain(20));
  HookPoint hp(hook_dir(), "before-dump");  // drained into cryod's memory; the job holds no copy
  auto fut =
      std::async(std::launch::async, [&] { return a->Checkpoint(Req(w.pid(), "fp-lost", true)); });
  ASSERT_TRUE(hp.Reached());
  a->Kill9();
  (void)fut.get();
  ::unlink((hook_dir() + "/before-dump.enable").c_str());
  Cryod& b = Node("node-a");
  EXPECT_TRUE(WaitGone(w)) << "the job was left held with its GPU data gone";
  EXPECT_TRUE(absl::StrContains(Slurp(b.log()), "is lost")) << Slurp(b.log());
  EXPECT_FALSE(std::filesystem::exists(store_ + "/checkpoints/fp-lost"));
  // (Recovery runs once cryod serves: the staging directory goes when it is done.)
  EXPECT_TRUE(WaitFor([&] { return EmptyDir(store_ + "/.staging"); }));
}

// Cryod killed after the drain, with memory shared between two processes of the job: recovery
// refills both, and the importer maps its exporter's new memory before either runs.
TEST_F(FastpathE2e, CryodKilledAfterTheDrainOfSharedMemoryGivesBothProcessesItBack) {
  Cryod* a = &Node("node-a", {}, HookEnv());
  Workload& w = GpuJob({"--share-mib", "8"});
  ASSERT_TRUE(w.WaitMain(20));
  ASSERT_TRUE(WaitFor([&] { return U(w.Status(), "peer_steps") > 10; })) << w.Status().dump();
  std::optional<nlohmann::json> st = KillCryodAfterTheDrain(*a, w, "fp-share-crash");
  ASSERT_TRUE(st);
  const uint64_t held = U(*st, "main");
  const uint64_t peer_held = U(*st, "peer_steps");
  Node("node-a");  // recovery: both refilled, the import carried, then both run
  ExpectRunsOnIntact(w, held);
  EXPECT_TRUE(WaitFor([&] { return U(w.Status(), "peer_steps") > peer_held + 10; }))
      << "the importer does not run on the shared memory again: " << w.Status().dump();
  EXPECT_EQ(U(w.Status(), "peer_mismatches"), 0u) << w.Status().dump();
  // (Recovery runs once cryod serves: the staging directory goes when it is done.)
  EXPECT_TRUE(WaitFor([&] { return EmptyDir(store_ + "/.staging"); }));
}

// Issue 34: after a SIGKILL, the restarted cryod refused its socket while it refilled a job (up
// to 30 minutes) and ignored SIGTERM meanwhile. Now the refill runs once cryod serves, the job
// stays claimed until it is done, SIGTERM ends the wait after the grace (the entry stays in the
// journal), and the next cryod finishes what is left. The job's library hangs in the driver
// (FAKE_CUDA_STALL_FILE) for as long as the test wants.
TEST_F(FastpathE2e, ARefillThatHangsNeitherKeepsCryodFromServingNorFromStopping) {
  Cryod* a = &Node("node-a", {}, HookEnv());
  const std::string stall = dir_ + "/stall-refill";
  Workload& w = GpuJob({}, FAKEGPU_BIN, {"FAKE_CUDA_STALL_FILE=" + stall});
  ASSERT_TRUE(w.WaitMain(20));
  std::optional<nlohmann::json> st = KillCryodAfterTheDrain(*a, w, "fp-hang");
  ASSERT_TRUE(st);
  const uint64_t held = U(*st, "main");
  std::ofstream(stall).close();
  ASSERT_TRUE(std::filesystem::exists(stall));

  // It serves while the job's refill hangs; the job is its recovery's until that is done.
  Cryod& b = Node("node-a", {"--shutdown-grace-s", "1"});
  EXPECT_TRUE(b.List().empty());
  grpc::Status again = b.Checkpoint(Req(w.pid(), "fp-hang-2", true));
  EXPECT_EQ(again.error_code(), StatusCode::ABORTED) << again.error_message();
  EXPECT_EQ(U(w.Status(), "main"), held) << "the job ran on memory that is not there";

  // SIGTERM ends it after the grace, the refill still hanging; the journal keeps the entry.
  EXPECT_EQ(b.StopCleanly(), "");
  EXPECT_TRUE(absl::StrContains(Slurp(b.log()), "the next start finishes it")) << Slurp(b.log());
  EXPECT_FALSE(NoJournalEntries(b.state_dir() + "/journal"));

  // The driver lets go: the library finishes the refill by itself, and the next cryod finds the
  // job running and removes what the checkpoint staged.
  ::unlink(stall.c_str());
  Cryod& c = Node("node-a");
  ExpectRunsOnIntact(w, held);
  EXPECT_TRUE(WaitFor([&] { return EmptyDir(store_ + "/.staging"); }));
  EXPECT_TRUE(WaitFor([&] { return NoJournalEntries(c.state_dir() + "/journal"); }));
  EXPECT_TRUE(c.List().empty());
}

// Found in review: a checkpoint cancelled after gpu_save waited 10 minutes in its undo, which
// polled the drain's closed channel again, with the job frozen and its GPU memory out. Now the
// undo refills at once: the cancel ends the checkpoint within seconds and the job runs on.
TEST_F(FastpathE2e, ACancelAfterTheGpuDataIsSavedRollsBackAtOnce) {
  Cryod& a = Node("node-a", {}, HookEnv());
  Workload& w = GpuJob();
  ASSERT_TRUE(w.WaitMain(20));
  HookPoint hp(hook_dir(), "before-dump");  // drained and saved: gpu_save is done
  v1::CheckpointRequest req = Req(w.pid(), "fp-cancel");
  req.set_operation_id("fp-cancel-me");
  auto fut = std::async(std::launch::async, [&] { return a.Checkpoint(req); });
  ASSERT_TRUE(hp.Reached());
  auto c = RunCli(a.socket(), {"cancel", "fp-cancel-me"});
  EXPECT_EQ(c.code, 0) << c.out;
  const absl::Time t0 = absl::Now();
  hp.Release();
  grpc::Status s = fut.get();
  EXPECT_EQ(s.error_code(), StatusCode::CANCELLED) << s.error_message();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(60)) << "the undo waited on the closed channel";
  ExpectRunsOnIntact(w, U(w.Status(), "main"));
  EXPECT_TRUE(EmptyDir(store_ + "/.staging"));
}

// Another user in the job's network namespace takes the job's channel name before the job's
// library starts listening (it loads the library, CUDA not started). cryod must not talk to it:
// the impostor gets no request and no descriptor into the store, the checkpoint goes on without
// the fast path, and the job comes back intact.
TEST_F(FastpathE2e, AnImpostorHoldingTheJobsChannelHearsNothing) {
  Cryod& a = Node("node-a");
  // The library mapped into the job, as the pod annotation makes it; the job never starts CUDA.
  auto pre = Workload::StartProgram(
      dir_, TESTLOAD_BIN, {"--mem-mib", "16", "--threads", "2"},
      {absl::StrCat("LD_PRELOAD=", FASTPATH_LIB), absl::StrCat("LD_LIBRARY_PATH=", FAKE_CUDA_DIR)});
  ASSERT_TRUE(pre.ok()) << pre.status();
  workloads_.push_back(std::move(*pre));
  Workload& job2 = *workloads_.back();

  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const std::string name = contract::gpu_fastpath::SocketName(job2.pid());
  pid_t impostor = ::fork();
  if (impostor == 0) {
    ::close(report[0]);
    ::close(ready[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    const socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name.size();
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(fd, 4) != 0) {
      ::_exit(3);
    }
    (void)!::write(ready[1], "r", 1);
    for (;;) {
      int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) continue;
      std::string text;
      std::vector<UniqueFd> fds;
      if (contract::gpu_fastpath::ReceiveMessage(c, &text, &fds)) {
        // What it would have been told, and how many descriptors it was handed.
        const char got = static_cast<char>('0' + std::min<size_t>(fds.size(), 9));
        (void)!::write(report[1], &got, 1);
        const std::string lie = absl::StrCat(
            R"({"ok": true, "state": "running", "owned_bytes": 18446744073709551615, "pid": )",
            job2.pid(), "}");
        // Whether cryod heard the lie is what the test reads from cryod's side.
        if (!contract::gpu_fastpath::SendMessage(c, lie)) ::perror("the fake library's reply");
      }
      ::close(c);
    }
  }
  ::close(report[1]);
  ::close(ready[1]);
  char r;
  ASSERT_EQ(::read(ready[0], &r, 1), 1) << "the impostor could not bind";
  ASSERT_TRUE(job2.WaitMain(10));

  grpc::Status s = a.Checkpoint(Req(job2.pid(), "impostor"));
  EXPECT_TRUE(s.ok()) << s.error_message();
  ::kill(impostor, SIGKILL);
  ::waitpid(impostor, nullptr, 0);
  std::string heard;
  char buf[64];
  ::fcntl(report[0], F_SETFL, O_NONBLOCK);
  for (ssize_t n; (n = ::read(report[0], buf, sizeof(buf))) > 0;) heard.append(buf, n);
  ::close(report[0]);
  ::close(ready[0]);
  EXPECT_EQ(heard, "") << "cryod spoke to the impostor (descriptors per message: " << heard << ")";
  EXPECT_TRUE(absl::StrContains(Slurp(a.log()), "not by the job")) << "the refusal is logged";
  if (!s.ok()) return;
  auto m = nlohmann::json::parse(Slurp(store_ + "/checkpoints/impostor/manifest.json"));
  EXPECT_TRUE(m["gpu_fastpath"].is_null()) << m["gpu_fastpath"].dump();
  ASSERT_TRUE(WaitGone(job2));
  const uint64_t last = U(job2.Status(), "main");
  s = a.Restore(RestoreReq("impostor"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(job2.WaitMain(last + 5));
  EXPECT_EQ(job2.Verify(), 1);
}

}  // namespace
}  // namespace cryo::e2e
