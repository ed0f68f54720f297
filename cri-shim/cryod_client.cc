#include "cri-shim/cryod_client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"
#include "cryo/v1/cryo.grpc.pb.h"
#include "lib/base/grpc_status.h"
#include "lib/base/status.h"

namespace cryo::shim {
namespace {

absl::Status FromCryod(const grpc::Status& s, const std::string& socket) {
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return Annotate(cryo::FromGrpc(s), absl::StrCat("cryod at ", socket, " is unreachable"));
  }
  return cryo::FromGrpc(s);
}

// gRPC's default reconnect backoff grows to two minutes: after a cryod restart the shim then
// failed replacement pods for ~28 s. cryod is local: retry within a second.
std::shared_ptr<grpc::Channel> Channel(const std::string& socket) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(absl::StrCat("unix:", socket),
                                   grpc::InsecureChannelCredentials(), args);
}

class CryodClient final : public Cryod {
 public:
  explicit CryodClient(std::string socket)
      : socket_(std::move(socket)), stub_(v1::Cryo::NewStub(Channel(socket_))) {}

  absl::StatusOr<v1::CheckpointInfo> Checkpoint(const v1::CheckpointRequest& req,
                                                absl::Time deadline) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    auto stream = stub_->Checkpoint(&ctx, req);
    v1::OperationEvent ev;
    v1::CheckpointInfo out;
    while (stream->Read(&ev)) {
      if (ev.has_checkpoint()) out = ev.checkpoint();
    }
    grpc::Status s = stream->Finish();
    if (!s.ok()) return FromCryod(s, socket_);
    return out;
  }

  absl::StatusOr<v1::JobCheckpointInfo> CheckpointJob(const v1::CheckpointJobRequest& req,
                                                      absl::Time deadline) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    auto stream = stub_->CheckpointJob(&ctx, req);
    v1::OperationEvent ev;
    v1::JobCheckpointInfo out;
    while (stream->Read(&ev)) {
      if (ev.has_job_checkpoint()) out = ev.job_checkpoint();
    }
    grpc::Status s = stream->Finish();
    if (!s.ok()) return FromCryod(s, socket_);
    return out;
  }

  absl::StatusOr<v1::RestoreResult> Restore(const v1::RestoreRequest& req,
                                            absl::Time deadline) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    auto stream = stub_->Restore(&ctx, req);
    v1::OperationEvent ev;
    v1::RestoreResult out;
    while (stream->Read(&ev)) {
      if (ev.has_restored()) out = ev.restored();
    }
    grpc::Status s = stream->Finish();
    if (!s.ok()) return FromCryod(s, socket_);
    return out;
  }

  absl::StatusOr<v1::CheckpointInfo> Get(const std::string& id) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    v1::GetCheckpointRequest req;
    req.set_checkpoint_id(id);
    v1::CheckpointInfo out;
    grpc::Status s = stub_->GetCheckpoint(&ctx, req, &out);
    if (!s.ok()) return FromCryod(s, socket_);
    return out;
  }

  absl::StatusOr<std::vector<v1::CheckpointInfo>> List(const std::string& workload) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    v1::ListCheckpointsRequest req;
    req.set_workload(workload);
    v1::ListCheckpointsResponse resp;
    grpc::Status s = stub_->ListCheckpoints(&ctx, req, &resp);
    if (!s.ok()) return FromCryod(s, socket_);
    return std::vector<v1::CheckpointInfo>(resp.checkpoints().begin(), resp.checkpoints().end());
  }

  absl::StatusOr<v1::ImportCheckpointImageResponse> ImportCheckpointImage(
      const std::string& image, absl::Time deadline) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    v1::ImportCheckpointImageRequest req;
    req.set_image(image);
    v1::ImportCheckpointImageResponse resp;
    grpc::Status s = stub_->ImportCheckpointImage(&ctx, req, &resp);
    if (!s.ok()) return FromCryod(s, socket_);
    return resp;
  }

 private:
  std::string socket_;
  std::unique_ptr<v1::Cryo::Stub> stub_;
};

}  // namespace

std::shared_ptr<Cryod> NewCryodClient(const std::string& socket_path) {
  return std::make_shared<CryodClient>(socket_path);
}

}  // namespace cryo::shim
