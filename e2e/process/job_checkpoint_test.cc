// Job checkpoints through a real cryod and real CRIU (issue 37): two members of one job keep a
// running sum over TCP both ways (cryo-sumpair). Both are checkpointed at one cut and one record
// is committed; killed and restored from their parts, the sums go on exactly. A member that
// fails fails the whole job checkpoint: nothing is published and every member runs on.
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "e2e/process/fixture.h"

namespace cryo::e2e {
namespace {

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

class JobCheckpointE2e : public ProcessFixture {
 protected:
  // The two members, connected: "left" listens, "right" connects.
  void StartPair() {
    const std::string port = std::to_string(FreePort());
    absl::StatusOr<std::unique_ptr<Workload>> left;
    std::thread t([&] { left = Workload::StartProgram(dir_, SUMPAIR_BIN, {"--listen", port}); });
    auto right = Workload::StartProgram(dir_, SUMPAIR_BIN, {"--connect", port});
    t.join();
    ASSERT_TRUE(left.ok()) << left.status();
    ASSERT_TRUE(right.ok()) << right.status();
    left_ = left->get();
    right_ = right->get();
    workloads_.push_back(std::move(*left));
    workloads_.push_back(std::move(*right));
  }
  v1::CheckpointJobRequest JobReq(const std::string& id, bool leave_running) {
    v1::CheckpointJobRequest r;
    r.set_namespace_("e2e");
    r.set_job("sum");
    r.set_job_checkpoint_id(id);
    for (auto [name, w] : {std::pair<const char*, Workload*>{"left", left_}, {"right", right_}}) {
      v1::JobMember* m = r.add_members();
      m->set_member(name);
      *m->mutable_checkpoint() = Req(w->pid(), "", leave_running);
      m->mutable_checkpoint()->set_workload(std::string("e2e.sum.") + name);
      m->mutable_checkpoint()->set_tcp_established(true);
    }
    return r;
  }
  // Both members gone (their nodes reclaimed), then restored together by `node` from job
  // checkpoint `id`: each goes on past where it was killed, its sum exact.
  void KillAndResumeTogether(Cryod& node, const std::string& id,
                             v1::JobRestoreResult* out = nullptr) {
    const uint64_t killed_at = std::max(Main(*left_), Main(*right_));
    for (Workload* w : {left_, right_}) {
      w->Kill();
      ASSERT_TRUE(WaitGone(*w));
    }
    v1::RestoreJobRequest rj;
    rj.set_namespace_("e2e");
    rj.set_job("sum");
    rj.set_job_checkpoint_id(id);
    rj.set_pid_wait_timeout_ms(10000);
    grpc::Status st = node.RestoreJob(rj, out);
    ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << Slurp(node.log());
    for (Workload* w : {left_, right_}) {
      // From the cut, not from the start (a new pair could not even meet: nobody listens).
      ASSERT_TRUE(w->WaitMain(killed_at + 10)) << "the restored pair did not go on";
      EXPECT_EQ(Ok(*w), 1) << "a byte between the members was lost or doubled by the cut";
    }
  }
  static uint64_t Main(Workload& w) { return w.Status().value("main", uint64_t{0}); }
  static int Ok(Workload& w) { return w.Status().value("ok", -1); }
  std::vector<v1::CheckpointInfo> PartsOf(Cryod& node, const std::string& id) {
    std::vector<v1::CheckpointInfo> out;
    for (auto& c : node.List()) {
      if (c.job_checkpoint() == id) out.push_back(c);
    }
    return out;
  }

  Workload* left_ = nullptr;
  Workload* right_ = nullptr;
};

TEST_F(JobCheckpointE2e, BothMembersAtOneCutOneCommitAndTheSumsGoOnExactlyAfterARestore) {
  Cryod& node = Node("node-a");
  StartPair();
  v1::JobCheckpointInfo info;
  grpc::Status st = node.CheckpointJob(JobReq("j1", /*leave_running=*/true), &info);
  ASSERT_TRUE(st.ok()) << st.error_message() << "\n" << Slurp(node.log());
  ASSERT_EQ(info.parts_size(), 2);
  EXPECT_EQ(info.parts(0).checkpoint_id(), "j1.left");
  EXPECT_EQ(info.parts(1).checkpoint_id(), "j1.right");
  EXPECT_EQ(info.cut_ms().count("cut_skew"), 1u);
  EXPECT_TRUE(Exists(store_ + "/jobs/e2e+sum+j1.json")) << "the record, written last";
  for (const auto& c : PartsOf(node, "j1")) {
    EXPECT_EQ(c.job(), "e2e/sum");
    EXPECT_EQ(c.job_uncommitted(), "") << c.checkpoint_id();
  }
  ASSERT_EQ(PartsOf(node, "j1").size(), 2u);
  auto listed = RunCli(node.socket(), {"list"});
  EXPECT_NE(listed.out.find("j1.left"), std::string::npos) << listed.out;
  EXPECT_EQ(listed.out.find("UNCOMMITTED"), std::string::npos) << listed.out;
  // Both run on, and their sums stay exact through the cut.
  for (Workload* w : {left_, right_}) {
    ASSERT_TRUE(w->WaitMain(Main(*w) + 5)) << "a member did not run on after the cut";
    EXPECT_EQ(Ok(*w), 1);
  }

  // Both gone (the job's nodes reclaimed); restored together, the first held (its packets to
  // the second dropped) until the second is back: else the second's kernel resets the
  // connection. A part alone is refused while not committed (daemon unit tests).
  v1::JobRestoreResult restored;
  KillAndResumeTogether(node, "j1", &restored);
  ASSERT_EQ(restored.members_size(), 2);
  EXPECT_EQ(restored.members().at("left").root_pid(), left_->pid()) << "restored as it was";
}

TEST_F(JobCheckpointE2e, AMemberThatFailsFailsTheJobCheckpointAndEveryMemberRunsOn) {
  Cryod& node = Node("node-a");
  StartPair();
  // A third member whose process is gone: the other two are dumped, wait at the cut and are
  // rolled back. Through the CLI, as an operator on the node would run it.
  auto cli = RunCli(node.socket(),
                    {"-o", "json", "checkpoint-job", "--job", "e2e/sum", "--id", "j2",
                     "--leave-running", "--tcp-established", "left=" + std::to_string(left_->pid()),
                     "right=" + std::to_string(right_->pid()), "ghost=999999"});
  EXPECT_EQ(cli.code, 1) << cli.out;
  EXPECT_NE(cli.out.find("member ghost"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("no member's part was committed"), std::string::npos) << cli.out;
  EXPECT_FALSE(Exists(store_ + "/jobs/e2e+sum+j2.json"));
  EXPECT_TRUE(PartsOf(node, "j2").empty()) << "a part of a failed job checkpoint was published";
  EXPECT_TRUE(EmptyDir(store_ + "/.staging"));
  for (Workload* w : {left_, right_}) {
    ASSERT_TRUE(w->WaitMain(Main(*w) + 5)) << "a member was left stopped";
    EXPECT_EQ(Ok(*w), 1);
  }
}

TEST_F(JobCheckpointE2e, AMemberKilledDuringItsDumpLeavesNoCommit) {
  Cryod& node = Node("node-a", {}, HookEnv());
  StartPair();
  HookPoint hp(hook_dir(), "before-dump");
  grpc::Status st;
  std::thread t([&] { st = node.CheckpointJob(JobReq("j3", /*leave_running=*/true)); });
  ASSERT_TRUE(hp.Reached());
  right_->Kill();
  ASSERT_TRUE(WaitGone(*right_));
  hp.Release();
  t.join();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("member right"), std::string::npos) << st.error_message();
  EXPECT_FALSE(Exists(store_ + "/jobs/e2e+sum+j3.json"));
  EXPECT_TRUE(PartsOf(node, "j3").empty());
  // The other member was not left stopped: it ran on, found its peer gone and ended on its own
  // (this job cannot go on with one member; its replacements resume from the last commit).
  EXPECT_TRUE(WaitFor([&] {
    left_->Reap();
    return left_->State() == '-';
  }));
  EXPECT_EQ(Ok(*left_), 0) << "it saw its peer go, as a job that lost a member does";
}

// Two nodes' cryods (one machine, one shared store): member left on node-a, right on node-b.
// node-a drives: it asks node-b's cryod over the Peer service (the nodes' token), both nodes'
// members meet at one cut, node-a commits. A call without the token is refused.
TEST_F(JobCheckpointE2e, MembersOnTwoNodesAtOneCutDrivenByOneCryod) {
  auto [ap, bp] = TwoNodes();
  Cryod& a = *ap;
  Cryod& b = *bp;
  StartPair();
  v1::CheckpointJobRequest req = JobReq("j4", /*leave_running=*/true);
  req.mutable_members(1)->set_node("node-b");
  v1::JobCheckpointInfo info;
  grpc::Status st = a.CheckpointJob(req, &info);
  ASSERT_TRUE(st.ok()) << st.error_message() << "\nnode-a:\n"
                       << Slurp(a.log()) << "\nnode-b:\n"
                       << Slurp(b.log());
  ASSERT_EQ(info.parts_size(), 2);
  EXPECT_EQ(info.parts(0).node_name(), "node-a");
  EXPECT_EQ(info.parts(1).node_name(), "node-b") << "node-b's cryod took its member";
  EXPECT_NE(Slurp(b.log()).find("drives job checkpoint j4"), std::string::npos);
  EXPECT_TRUE(Exists(store_ + "/jobs/e2e+sum+j4.json"));
  for (const auto& c : PartsOf(b, "j4")) EXPECT_EQ(c.job_uncommitted(), "") << c.checkpoint_id();
  for (Workload* w : {left_, right_}) {
    ASSERT_TRUE(w->WaitMain(Main(*w) + 5)) << "a member did not run on after the cut";
    EXPECT_EQ(Ok(*w), 1);
  }
  // Killed; restored together (here on node-b: both parts are in the shared store), the sums
  // go on exactly.
  KillAndResumeTogether(b, "j4");

  // A member on node-b that fails (its process gone): node-a's member was dumped and waits at
  // the cut, hears the abort, and runs on; nothing is committed or published.
  StartPair();
  req = JobReq("j6", /*leave_running=*/true);
  req.mutable_members(1)->set_node("node-b");
  req.mutable_members(1)->mutable_checkpoint()->set_pid(999999);
  st = a.CheckpointJob(req);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("node node-b"), std::string::npos) << st.error_message();
  EXPECT_FALSE(Exists(store_ + "/jobs/e2e+sum+j6.json"));
  EXPECT_TRUE(PartsOf(a, "j6").empty());
  ASSERT_TRUE(left_->WaitMain(Main(*left_) + 5)) << "node-a's member was left stopped";
  EXPECT_EQ(Ok(*left_), 1);

  // node-b's cryod answers nothing to a caller without the nodes' certificate (plaintext, or a
  // certificate of another CA, even with the token), nor to one with it but not the token.
  auto join = [&](std::shared_ptr<grpc::ChannelCredentials> creds, const std::string& token) {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("cryo-peer");
    auto stub = v1::Peer::NewStub(
        grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(peer_port_b_), creds, args));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub->JoinJobCheckpoint(&ctx);
    v1::PeerCutMessage start;
    *start.mutable_start() = JobReq("j5", true);
    stream->Write(start);
    stream->WritesDone();
    v1::PeerCutReply reply;
    EXPECT_FALSE(stream->Read(&reply));
    return stream->Finish();
  };
  auto tls_of = [](const std::string& dir) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = Slurp(dir + "/ca.crt");
    o.pem_private_key = Slurp(dir + "/tls.key");
    o.pem_cert_chain = Slurp(dir + "/tls.crt");
    return grpc::SslCredentials(o);
  };
  const std::string token = "peer-token-of-the-e2e-cluster";
  grpc::Status plain = join(grpc::InsecureChannelCredentials(), token);
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  const std::string stranger = dir_ + "/stranger-tls";
  std::filesystem::create_directories(stranger);
  std::string why;
  ASSERT_TRUE(MakePeerTls(stranger, "cryo-peer", &why)) << why;
  grpc::SslCredentialsOptions half;  // trusts node-b, but shows another CA's certificate
  half.pem_root_certs = Slurp(tls_dir_ + "/ca.crt");
  half.pem_private_key = Slurp(stranger + "/tls.key");
  half.pem_cert_chain = Slurp(stranger + "/tls.crt");
  grpc::Status foreign = join(grpc::SslCredentials(half), token);
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::UNAVAILABLE) << foreign.error_message();
  grpc::Status untrusting = join(tls_of(stranger), token);  // node-b's certificate not trusted
  EXPECT_EQ(untrusting.error_code(), grpc::StatusCode::UNAVAILABLE) << untrusting.error_message();
  grpc::Status denied = join(tls_of(tls_dir_), "not-the-token-of-this-cluster");
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::UNAUTHENTICATED) << denied.error_message();
  EXPECT_TRUE(PartsOf(b, "j5").empty());
  EXPECT_NE(Slurp(b.log()).find("(mutual TLS)"), std::string::npos);
}

// A node whose cryod stops answering in the middle (its machine gone, a partition): the driver
// finds out by the stream's keepalive, aborts, and its own member runs on; the node, once back,
// hears nothing more from the driver and rolls its member back too. Nothing is committed.
TEST_F(JobCheckpointE2e, ANodeThatStopsAnsweringAbortsTheJobCheckpointAndBothMembersRunOn) {
  auto [ap, bp] = TwoNodes(HookEnv());
  Cryod& a = *ap;
  Cryod& b = *bp;
  StartPair();
  HookPoint hp(hook_dir(), "before-dump");  // node-b's cryod only has the hooks
  v1::CheckpointJobRequest req = JobReq("j7", /*leave_running=*/true);
  req.mutable_members(1)->set_node("node-b");
  grpc::Status st;
  std::thread t([&] { st = a.CheckpointJob(req); });
  ASSERT_TRUE(hp.Reached());
  ::kill(b.pid(), SIGSTOP);  // node-b vanishes without closing anything
  hp.Release();
  t.join();
  ::kill(b.pid(), SIGCONT);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("node node-b"), std::string::npos) << st.error_message();
  EXPECT_FALSE(Exists(store_ + "/jobs/e2e+sum+j7.json"));
  // Both members run on: node-a's was rolled back at once, node-b's when its cryod, back,
  // found the driver gone.
  for (Workload* w : {left_, right_}) {
    ASSERT_TRUE(w->WaitMain(Main(*w) + 5, absl::Seconds(60))) << "a member was left stopped";
    EXPECT_EQ(Ok(*w), 1);
  }
  EXPECT_TRUE(WaitFor([&] { return PartsOf(b, "j7").empty(); }));
}

}  // namespace
}  // namespace cryo::e2e
