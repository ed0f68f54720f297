#pragma once

// gRPC glue for the cryo.v1.Cryo service: converts requests (convert.h), starts operations
// through the OperationRunner, streams their progress and maps absl::Status to gRPC status.
// No checkpoint logic lives here.

#include <grpcpp/grpcpp.h>

#include <atomic>

#include "cryo/v1/cryo.grpc.pb.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/operation_runner.h"

namespace cryo::service {

class CryoService final : public v1::Cryo::Service {
 public:
  CryoService(engine::Engine* engine, engine::OperationRunner* runner,
              engine::OperationRegistry* ops)
      : engine_(engine), runner_(runner), ops_(ops) {}

  grpc::Status Checkpoint(grpc::ServerContext* ctx, const v1::CheckpointRequest* req,
                          grpc::ServerWriter<v1::OperationEvent>* w) override;
  grpc::Status RestoreJob(grpc::ServerContext* ctx, const v1::RestoreJobRequest* req,
                          grpc::ServerWriter<v1::OperationEvent>* w) override;
  grpc::Status CheckpointJob(grpc::ServerContext* ctx, const v1::CheckpointJobRequest* req,
                             grpc::ServerWriter<v1::OperationEvent>* w) override;
  grpc::Status Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                       grpc::ServerWriter<v1::OperationEvent>* w) override;
  grpc::Status WatchOperation(grpc::ServerContext* ctx, const v1::WatchOperationRequest* req,
                              grpc::ServerWriter<v1::OperationEvent>* w) override;
  grpc::Status GetCheckpoint(grpc::ServerContext* ctx, const v1::GetCheckpointRequest* req,
                             v1::CheckpointInfo* resp) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* ctx, const v1::ListCheckpointsRequest* req,
                               v1::ListCheckpointsResponse* resp) override;
  grpc::Status DeleteCheckpoint(grpc::ServerContext* ctx, const v1::DeleteCheckpointRequest* req,
                                v1::DeleteCheckpointResponse* resp) override;
  grpc::Status NodeInfo(grpc::ServerContext* ctx, const v1::NodeInfoRequest* req,
                        v1::NodeInfoResponse* resp) override;
  grpc::Status ImportCheckpointImage(grpc::ServerContext* ctx,
                                     const v1::ImportCheckpointImageRequest* req,
                                     v1::ImportCheckpointImageResponse* resp) override;
  grpc::Status CancelOperation(grpc::ServerContext* ctx, const v1::CancelOperationRequest* req,
                               v1::CancelOperationResponse* resp) override;

 private:
  grpc::Status Run(grpc::ServerContext* ctx, const std::string& requested_id,
                   const std::string& kind, const std::string& target, bool detach,
                   engine::OperationRunner::Body body, grpc::ServerWriter<v1::OperationEvent>* w,
                   engine::OperationRunner::StartOptions opt = {});
  // `owner`: the call that started the operation; when it goes away (and did not detach), the
  // operation is cancelled.
  grpc::Status Stream(grpc::ServerContext* ctx, engine::Operation& op, bool owner,
                      grpc::ServerWriter<v1::OperationEvent>* w);

  engine::Engine* engine_;
  engine::OperationRunner* runner_;
  engine::OperationRegistry* ops_;
  // Each watcher holds one of gRPC's threads for as long as it likes: bounded, so that watchers
  // cannot starve the calls that do the work (2,000 of them made 2,057 threads).
  std::atomic<int> watchers_{0};
};

inline constexpr int kMaxWatchers = 64;

}  // namespace cryo::service
