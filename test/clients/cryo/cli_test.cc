// The cryo CLI against a fake cryod on a unix socket: what it refuses before asking, and what it
// prints of what a shared store says.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "cryo/v1/cryo.grpc.pb.h"
#include "gtest/gtest.h"
#include "lib/base/subprocess.h"
#include "test/daemon/test_util.h"

namespace cryo {
namespace {

// Terminal control: clears the screen, moves the cursor, rings the bell.
constexpr char kEvil[] = "a\x1b[2J\x1b[1;1Hb\x07\r\n";

// Answers with what a hostile manifest in a shared store could carry, and counts what reached it.
class FakeCryod final : public v1::Cryo::Service {
 public:
  grpc::Status ListCheckpoints(grpc::ServerContext*, const v1::ListCheckpointsRequest*,
                               v1::ListCheckpointsResponse* resp) override {
    *resp->add_checkpoints() = Evil();
    return grpc::Status::OK;
  }
  grpc::Status GetCheckpoint(grpc::ServerContext*, const v1::GetCheckpointRequest*,
                             v1::CheckpointInfo* resp) override {
    *resp = Evil();
    auto* f = resp->add_files();
    f->set_path(std::string("images/") + kEvil);
    f->set_checksum(kEvil);
    return grpc::Status::OK;
  }
  grpc::Status Restore(grpc::ServerContext*, const v1::RestoreRequest*,
                       grpc::ServerWriter<v1::OperationEvent>*) override {
    ++restores;
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "fake");
  }
  grpc::Status Checkpoint(grpc::ServerContext*, const v1::CheckpointRequest* req,
                          grpc::ServerWriter<v1::OperationEvent>*) override {
    ghost_limit = req->criu().ghost_limit_bytes();
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "fake");
  }
  grpc::Status WatchOperation(grpc::ServerContext*, const v1::WatchOperationRequest* req,
                              grpc::ServerWriter<v1::OperationEvent>* w) override {
    v1::OperationEvent e;
    e.set_operation_id(req->operation_id());
    e.mutable_restored()->set_checkpoint_id("c1");
    e.mutable_restored()->set_root_pid(4242);
    (*e.mutable_restored()->mutable_stage_ms())["restore"] = 120;
    w->Write(e);
    return grpc::Status::OK;
  }
  std::atomic<int> restores{0};
  std::atomic<uint64_t> ghost_limit{0};

 private:
  static v1::CheckpointInfo Evil() {
    v1::CheckpointInfo c;
    c.set_checkpoint_id("c1");
    c.set_workload(kEvil);
    c.set_node_name(kEvil);
    c.set_created_at(kEvil);
    c.set_command(kEvil);
    c.set_damaged(kEvil);
    c.set_kernel(kEvil);
    c.set_criu_version(kEvil);
    c.set_store_path(kEvil);
    (*c.mutable_labels())[kEvil] = kEvil;
    (*c.mutable_stage_ms())[kEvil] = 1;
    return c;
  }
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_ = dir_.path + "/cryod.sock";
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + socket_, grpc::InsecureServerCredentials());
    b.RegisterService(&fake_);
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr);
  }
  void TearDown() override { server_->Shutdown(); }
  RunOutput Cryo(std::vector<std::string> args) {
    RunOptions o;
    o.argv = {CRYO_BIN, "--socket", socket_};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.timeout = absl::Seconds(60);
    auto r = ::cryo::Run(o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunOutput{};
  }
  TempDir dir_;
  std::string socket_;
  FakeCryod fake_;
  std::unique_ptr<grpc::Server> server_;
};

bool HasControl(const std::string& s) {
  for (unsigned char c : s) {
    if ((c < 0x20 && c != '\n') || c == 0x7f) return true;
  }
  return false;
}

// Found on 2026-11-24: names with control characters from a shared store were printed raw by
// `cryo list`; created_at, the damage reason, the kernel and file paths still were.
TEST_F(CliTest, ListAndInspectEscapeEverythingTheStoreSays) {
  RunOutput list = Cryo({"list"});
  EXPECT_EQ(list.exit.code, 0) << list.err;
  EXPECT_TRUE(absl::StrContains(list.out, "c1")) << list.out;
  EXPECT_TRUE(absl::StrContains(list.out, "\\x1b[2J")) << list.out;
  EXPECT_FALSE(HasControl(list.out)) << list.out;

  RunOutput inspect = Cryo({"inspect", "c1"});
  EXPECT_EQ(inspect.exit.code, 0) << inspect.err;
  EXPECT_TRUE(absl::StrContains(inspect.out, "images/a\\x1b[2J")) << inspect.out;
  EXPECT_TRUE(absl::StrContains(inspect.out, "DAMAGED:   a\\x1b")) << inspect.out;
  EXPECT_FALSE(HasControl(inspect.out)) << inspect.out;
}

// Found on 2026-11-24: `--pid-wait 100000h` wrapped silently to a short wait in the request's
// 32-bit milliseconds. It is refused before anything is sent.
TEST_F(CliTest, APidWaitBeyondWhatCryodTakesIsRefusedBeforeAsking) {
  RunOutput r = Cryo({"restore", "c1", "--pid-wait", "100000h"});
  EXPECT_EQ(r.exit.code, 2) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "pid-wait")) << r.err;
  EXPECT_EQ(fake_.restores.load(), 0);
  // Within the bound it is asked (and the fake refuses).
  r = Cryo({"restore", "c1", "--pid-wait", "1h"});
  EXPECT_NE(r.exit.code, 0);
  EXPECT_EQ(fake_.restores.load(), 1);
}

// Found on 2026-11-28 (issue 38): help went to stderr, there was no `cryo version`, `watch`
// printed protobuf text, and `--ghost-limit 4T` asked for 4Ti, which it then refused.
TEST_F(CliTest, HelpVersionWatchAndSizesAsAUserExpects) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--help"}, {"help"}, {"checkpoint", "--help"}}) {
    RunOutput r = Cryo(args);
    EXPECT_EQ(r.exit.code, 0) << args[0];
    EXPECT_TRUE(absl::StartsWith(r.out, "usage: cryo")) << r.out;
    EXPECT_EQ(r.err, "") << args[0];
  }
  RunOutput v = Cryo({"version"});
  EXPECT_EQ(v.exit.code, 0) << v.err;
  EXPECT_EQ(v.out, std::string("cryo ") + CRYO_VERSION + "\n");
  v = Cryo({"-o", "json", "version"});
  EXPECT_TRUE(absl::StrContains(v.out, std::string("\"version\": \"") + CRYO_VERSION)) << v.out;

  RunOutput w = Cryo({"watch", "op-1"});
  EXPECT_EQ(w.exit.code, 0) << w.err;
  EXPECT_EQ(w.out, "restored c1 as pid 4242\n  stages: restore 120ms\n");

  RunOutput t = Cryo({"checkpoint", "1", "--ghost-limit", "4T"});
  EXPECT_EQ(t.exit.code, 2);
  EXPECT_TRUE(absl::StrContains(t.err, "write 4Ti")) << t.err;
  EXPECT_EQ(fake_.ghost_limit.load(), 0u) << "refused before asking";
  t = Cryo({"checkpoint", "1", "--ghost-limit", "4Ti"});
  EXPECT_EQ(t.exit.code, 1) << t.err << " (the fake refuses the checkpoint itself)";
  EXPECT_EQ(fake_.ghost_limit.load(), uint64_t{4} << 40);
}

// Found on 2026-11-29: `cryo list --socket PATH` (the global flag after the command, as the
// usage allows) said it could not reach cryod "at PATH" while it had dialled the default socket.
TEST_F(CliTest, ASocketGivenAfterTheCommandIsTheOneDialled) {
  RunOptions o;
  o.argv = {CRYO_BIN, "--socket", dir_.path + "/nothing-here.sock", "list", "--socket", socket_};
  o.timeout = absl::Seconds(60);
  auto r = ::cryo::Run(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit.code, 0) << r->err;
  EXPECT_TRUE(absl::StrContains(r->out, "c1")) << r->out;
  o.argv = {CRYO_BIN, "list", "--socket", dir_.path + "/nothing-here.sock"};
  r = ::cryo::Run(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit.code, 1);
  EXPECT_TRUE(absl::StrContains(r->err, "nothing-here.sock: No such file")) << r->err;
}

}  // namespace
}  // namespace cryo
