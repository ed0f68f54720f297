#include "daemon/service/grpc_service.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/service/convert.h"
#include "lib/base/grpc_status.h"
#include "lib/base/log.h"

namespace cryo::service {
grpc::Status CryoService::Stream(grpc::ServerContext* ctx, engine::Operation& op, bool owner,
                                 grpc::ServerWriter<v1::OperationEvent>* w) {
  uint64_t seen = 0;
  size_t cursor = 0;
  bool client_gone = false;
  for (;;) {
    seen = op.WaitForChange(seen, absl::Now() + absl::Milliseconds(500));
    const bool done = op.done();
    if (!done && ctx->IsCancelled()) {
      // A caller that gave up (Ctrl-C, its deadline) does not want the result: roll back.
      if (owner) op.Cancel("the caller went away or its deadline passed");
      return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
    for (const engine::Progress& p : op.ProgressSince(&cursor)) {
      if (client_gone) break;
      v1::OperationEvent ev;
      ev.set_operation_id(op.id());
      *ev.mutable_progress() = ToProto(p);
      if (!w->Write(ev)) client_gone = true;
    }
    if (done) break;
  }
  absl::Status st = op.status();
  if (st.ok()) w->Write(ResultEvent(op.id(), op.result()));
  return ToGrpc(st);
}

grpc::Status CryoService::Run(grpc::ServerContext* ctx, const std::string& requested_id,
                              const std::string& kind, const std::string& target, bool detach,
                              engine::OperationRunner::Body body,
                              grpc::ServerWriter<v1::OperationEvent>* w,
                              engine::OperationRunner::StartOptions opt) {
  auto op = runner_->Start(requested_id, kind, target, std::move(body), opt);
  if (!op.ok()) return ToGrpc(op.status());
  return Stream(ctx, **op, /*owner=*/!detach, w);
}

grpc::Status CryoService::Checkpoint(grpc::ServerContext* ctx, const v1::CheckpointRequest* req,
                                     grpc::ServerWriter<v1::OperationEvent>* w) {
  const std::string target = req->container_id().empty()
                                 ? absl::StrCat("pid ", req->pid())
                                 : absl::StrCat("container ", req->container_id().substr(0, 13));
  engine::CheckpointRequest r = FromProto(*req, DeadlineOf(ctx));
  engine::Engine* e = engine_;
  // The plan at a stop: the stop's checkpoint, which the background on its target gives way to.
  engine::OperationRunner::StartOptions opt;
  if (r.plan) opt = {engine::Priority::kStop, r.deadline};
  return Run(
      ctx, req->operation_id(), "checkpoint", target, req->detach(),
      [e, r](engine::Operation& op) -> absl::StatusOr<engine::OperationResult> {
        auto res = e->Checkpoint(r, op);
        if (!res.ok()) return res.status();
        return engine::OperationResult(*std::move(res));
      },
      w, opt);
}

grpc::Status CryoService::CheckpointJob(grpc::ServerContext* ctx,
                                        const v1::CheckpointJobRequest* req,
                                        grpc::ServerWriter<v1::OperationEvent>* w) {
  engine::JobCheckpointRequest r = FromProto(*req, DeadlineOf(ctx));
  engine::Engine* e = engine_;
  return Run(
      ctx, req->operation_id(), "checkpoint-job",
      absl::StrCat("job ", req->namespace_().substr(0, 63), "/", req->job().substr(0, 253)),
      req->detach(),
      [e, r](engine::Operation& op) -> absl::StatusOr<engine::OperationResult> {
        auto res = e->CheckpointJob(r, op);
        if (!res.ok()) return res.status();
        return engine::OperationResult(*std::move(res));
      },
      w);
}

grpc::Status CryoService::RestoreJob(grpc::ServerContext* ctx, const v1::RestoreJobRequest* req,
                                     grpc::ServerWriter<v1::OperationEvent>* w) {
  engine::JobRestoreRequest r = FromProto(*req, DeadlineOf(ctx));
  engine::Engine* e = engine_;
  return Run(
      ctx, req->operation_id(), "restore-job",
      absl::StrCat("job ", req->namespace_().substr(0, 63), "/", req->job().substr(0, 253)),
      req->detach(),
      [e, r](engine::Operation& op) -> absl::StatusOr<engine::OperationResult> {
        auto res = e->RestoreJob(r, op);
        if (!res.ok()) return res.status();
        return engine::OperationResult(*std::move(res));
      },
      w);
}

grpc::Status CryoService::Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                                  grpc::ServerWriter<v1::OperationEvent>* w) {
  engine::RestoreRequest r = FromProto(*req, DeadlineOf(ctx));
  engine::Engine* e = engine_;
  return Run(
      ctx, req->operation_id(), "restore", req->checkpoint_id(), req->detach(),
      [e, r](engine::Operation& op) -> absl::StatusOr<engine::OperationResult> {
        auto res = e->Restore(r, op);
        if (!res.ok()) return res.status();
        return engine::OperationResult(*std::move(res));
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
  if (watchers_.fetch_add(1) >= kMaxWatchers) {
    watchers_.fetch_sub(1);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("already ", kMaxWatchers, " operations watched; retry later"));
  }
  grpc::Status st = Stream(ctx, *op, /*owner=*/false, w);
  watchers_.fetch_sub(1);
  return st;
}

grpc::Status CryoService::CancelOperation(grpc::ServerContext*,
                                          const v1::CancelOperationRequest* req,
                                          v1::CancelOperationResponse*) {
  auto op = ops_->Find(req->operation_id());
  if (!op) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no operation '", req->operation_id(), "'"));
  }
  if (op->done()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("operation '", req->operation_id(), "' has already ended"));
  }
  op->Cancel(req->reason().empty() ? "cancelled by a client" : req->reason().substr(0, 200));
  return grpc::Status::OK;
}

grpc::Status CryoService::GetCheckpoint(grpc::ServerContext*, const v1::GetCheckpointRequest* req,
                                        v1::CheckpointInfo* resp) {
  auto r = engine_->Get(req->checkpoint_id());
  if (!r.ok()) return ToGrpc(r.status());
  *resp = ToProto(*r, /*with_files=*/true);
  return grpc::Status::OK;
}

grpc::Status CryoService::ListCheckpoints(grpc::ServerContext*,
                                          const v1::ListCheckpointsRequest* req,
                                          v1::ListCheckpointsResponse* resp) {
  auto r = engine_->List(req->workload());
  if (!r.ok()) return ToGrpc(r.status());
  *resp = ToListResponse(*r);
  return grpc::Status::OK;
}

grpc::Status CryoService::DeleteCheckpoint(grpc::ServerContext*,
                                           const v1::DeleteCheckpointRequest* req,
                                           v1::DeleteCheckpointResponse*) {
  return ToGrpc(engine_->Delete(req->checkpoint_id()));
}

grpc::Status CryoService::NodeInfo(grpc::ServerContext*, const v1::NodeInfoRequest*,
                                   v1::NodeInfoResponse* resp) {
  *resp = ToProto(engine_->Node(), ops_->Running());
  return grpc::Status::OK;
}

grpc::Status CryoService::ImportCheckpointImage(grpc::ServerContext* ctx,
                                                const v1::ImportCheckpointImageRequest* req,
                                                v1::ImportCheckpointImageResponse* resp) {
  auto r = engine_->ImportImage(req->image(), DeadlineOf(ctx));
  if (!r.ok()) return ToGrpc(r.status());
  *resp->mutable_checkpoint() = ToProto(r->manifest, /*with_files=*/false);
  resp->set_container_image(r->container_image);
  resp->set_container_image_ref(r->container_image_ref);
  resp->set_imported_now(r->imported_now);
  return grpc::Status::OK;
}

}  // namespace cryo::service
