#pragma once

// gRPC glue for the cryo.v1.Cryo service: turns requests into Engine calls, streams progress,
// maps absl::Status to gRPC status. No checkpoint logic lives here.

#include <grpcpp/grpcpp.h>

#include <atomic>

#include "absl/time/time.h"
#include "cryo/v1/cryo.grpc.pb.h"
#include "daemon/metrics/metrics.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/operations.h"
#include "lib/base/grpc_status.h"

namespace cryo::service {

class CryoService final : public v1::Cryo::Service {
 public:
  CryoService(Engine* engine, OperationRegistry* ops, metrics::Metrics* metrics)
      : engine_(engine), ops_(ops), metrics_(metrics) {}

  grpc::Status Checkpoint(grpc::ServerContext* ctx, const v1::CheckpointRequest* req,
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

  // Operations still running in their own threads (they outlive their callers).
  int workers() const { return workers_.load(); }

  // Starts a checkpoint (leave running) of every running container whose pod opted in to
  // checkpoint-on-stop, each as its own operation, in parallel; returns how many started. For
  // node-wide triggers such as a cloud's termination notice; returns without waiting.
  absl::StatusOr<int> CheckpointOptedIn(const std::string& reason);

 private:
  using Body = std::function<absl::StatusOr<v1::OperationEvent>(Operation&)>;
  // Registers the operation and runs body on a thread of its own.
  absl::StatusOr<std::shared_ptr<Operation>> StartOperation(const std::string& requested_id,
                                                            const std::string& kind,
                                                            const std::string& target, Body body);
  Body CheckpointBody(const v1::CheckpointRequest& req,
                      absl::Time deadline = absl::InfiniteFuture());
  grpc::Status RunOperation(grpc::ServerContext* ctx, const std::string& requested_id,
                            const std::string& kind, const std::string& target, Body body,
                            grpc::ServerWriter<v1::OperationEvent>* w);
  grpc::Status Stream(grpc::ServerContext* ctx, Operation& op,
                      grpc::ServerWriter<v1::OperationEvent>* w);

  Engine* engine_;
  OperationRegistry* ops_;
  metrics::Metrics* metrics_;
  std::atomic<int> workers_{0};
};

}  // namespace cryo::service
