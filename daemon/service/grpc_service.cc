#include "daemon/service/grpc_service.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"

namespace cryo::service {

grpc::Status CryoService::Stream(grpc::ServerContext* ctx, Operation& op,
                                 grpc::ServerWriter<v1::OperationEvent>* w) {
  uint64_t seen = 0;
  size_t cursor = 0;
  bool client_gone = false;
  for (;;) {
    seen = op.WaitForChange(seen, absl::Now() + absl::Milliseconds(500));
    const bool done = op.done();
    if (!done && ctx->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
    for (const v1::Progress& p : op.ProgressSince(&cursor)) {
      if (client_gone) break;
      v1::OperationEvent ev;
      ev.set_operation_id(op.id());
      *ev.mutable_progress() = p;
      if (!w->Write(ev)) client_gone = true;
    }
    if (done) break;
  }
  absl::Status st = op.status();
  if (st.ok()) w->Write(op.final_event());
  return ToGrpc(st);
}

absl::StatusOr<std::shared_ptr<Operation>> CryoService::StartOperation(
    const std::string& requested_id, const std::string& kind, const std::string& target,
    Body body) {
  std::string id = requested_id.empty() ? absl::StrCat(kind.substr(0, 2), "-", RandomHex(8))
                                        : requested_id;
  if (absl::Status s = ValidateCheckpointId(id); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("operation id: ", s.message()));
  }
  auto op = ops_->Start(id, kind, target);
  if (!op.ok()) return op.status();
  std::shared_ptr<Operation> shared = *op;
  ++workers_;
  if (metrics_) metrics_->SetInFlight(ops_->running_count());
  // The work runs in its own thread so it finishes even if its caller disconnects.
  std::thread([this, shared, body = std::move(body), kind] {
    absl::StatusOr<v1::OperationEvent> r = body(*shared);
    absl::Status st = r.ok() ? absl::OkStatus() : r.status();
    if (!st.ok()) CRYO_LOG(Warning) << kind << " " << shared->id() << " failed: " << st;
    if (metrics_) metrics_->CountOperation(kind, st.ok() ? "ok" : CodeName(st.code()));
    shared->Finish(st, r.ok() ? *r : v1::OperationEvent());
    ops_->Retire(shared->id());
    if (metrics_) metrics_->SetInFlight(ops_->running_count());
    --workers_;
  }).detach();
  return shared;
}

grpc::Status CryoService::RunOperation(grpc::ServerContext* ctx, const std::string& requested_id,
                                       const std::string& kind, const std::string& target,
                                       Body body, grpc::ServerWriter<v1::OperationEvent>* w) {
  auto op = StartOperation(requested_id, kind, target, std::move(body));
  if (!op.ok()) return ToGrpc(op.status());
  return Stream(ctx, **op, w);
}

CryoService::Body CryoService::CheckpointBody(const v1::CheckpointRequest& req,
                                              absl::Time deadline) {
  return [this, req, deadline](Operation& op) -> absl::StatusOr<v1::OperationEvent> {
    auto info = engine_->Checkpoint(req, op, deadline);
    if (!info.ok()) return info.status();
    v1::OperationEvent ev;
    *ev.mutable_checkpoint() = *info;
    return ev;
  };
}

grpc::Status CryoService::Checkpoint(grpc::ServerContext* ctx, const v1::CheckpointRequest* req,
                                     grpc::ServerWriter<v1::OperationEvent>* w) {
  const std::string target = req->container_id().empty()
                                 ? absl::StrCat("pid ", req->pid())
                                 : absl::StrCat("container ", req->container_id().substr(0, 13));
  // gRPC's "no deadline" is the largest time_point.
  const absl::Time deadline = ctx->deadline() == std::chrono::system_clock::time_point::max()
                                  ? absl::InfiniteFuture()
                                  : absl::FromChrono(ctx->deadline());
  return RunOperation(ctx, req->operation_id(), "checkpoint", target,
                      CheckpointBody(*req, deadline), w);
}

absl::StatusOr<int> CryoService::CheckpointOptedIn(const std::string& reason) {
  auto reqs = engine_->OptedInCheckpoints(reason);
  if (!reqs.ok()) return reqs.status();
  int started = 0;
  for (const auto& req : *reqs) {
    auto op = StartOperation("", "checkpoint",
                             absl::StrCat("container ", req.container_id().substr(0, 13)),
                             CheckpointBody(req));
    if (op.ok()) {
      ++started;
    } else {
      CRYO_LOG(Warning) << "checkpoint of container " << req.container_id() << " (" << reason
                        << "): " << op.status();
    }
  }
  return started;
}

grpc::Status CryoService::Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                                  grpc::ServerWriter<v1::OperationEvent>* w) {
  v1::RestoreRequest copy = *req;
  return RunOperation(
      ctx, req->operation_id(), "restore", req->checkpoint_id(),
      [this, copy](Operation& op) -> absl::StatusOr<v1::OperationEvent> {
        auto res = engine_->Restore(copy, op);
        if (!res.ok()) return res.status();
        v1::OperationEvent ev;
        *ev.mutable_restored() = *res;
        return ev;
      },
      w);
}

grpc::Status CryoService::WatchOperation(grpc::ServerContext* ctx,
                                         const v1::WatchOperationRequest* req,
                                         grpc::ServerWriter<v1::OperationEvent>* w) {
  auto op = ops_->Find(req->operation_id());
  if (!op) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no operation '", req->operation_id(), "'"));
  }
  return Stream(ctx, *op, w);
}

grpc::Status CryoService::GetCheckpoint(grpc::ServerContext*, const v1::GetCheckpointRequest* req,
                                        v1::CheckpointInfo* resp) {
  auto r = engine_->Get(req->checkpoint_id());
  if (!r.ok()) return ToGrpc(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status CryoService::ListCheckpoints(grpc::ServerContext*,
                                          const v1::ListCheckpointsRequest* req,
                                          v1::ListCheckpointsResponse* resp) {
  auto r = engine_->List(req->workload());
  if (!r.ok()) return ToGrpc(r.status());
  for (auto& i : *r) *resp->add_checkpoints() = std::move(i);
  return grpc::Status::OK;
}

grpc::Status CryoService::DeleteCheckpoint(grpc::ServerContext*,
                                           const v1::DeleteCheckpointRequest* req,
                                           v1::DeleteCheckpointResponse*) {
  return ToGrpc(engine_->Delete(req->checkpoint_id()));
}

grpc::Status CryoService::NodeInfo(grpc::ServerContext*, const v1::NodeInfoRequest*,
                                   v1::NodeInfoResponse* resp) {
  *resp = engine_->NodeInfo(ops_->Running());
  return grpc::Status::OK;
}

}  // namespace cryo::service
