#pragma once

// The engine's domain types <-> the cryo.v1 API messages: the one place that knows both.

#include <grpcpp/server_context.h>

#include <string>

#include "cryo/v1/cryo.pb.h"
#include "daemon/engine/operation.h"
#include "daemon/engine/types.h"
#include "daemon/gpu/fastpath_cut.h"

namespace cryo::service {

// A call's deadline (InfiniteFuture when it set none).
absl::Time DeadlineOf(const grpc::ServerContext* ctx);

engine::CheckpointRequest FromProto(const v1::CheckpointRequest& r, absl::Time deadline);
engine::RestoreRequest FromProto(const v1::RestoreRequest& r, absl::Time deadline);
engine::JobCheckpointRequest FromProto(const v1::CheckpointJobRequest& r, absl::Time deadline);
engine::JobRestoreRequest FromProto(const v1::RestoreJobRequest& r, absl::Time deadline);
// The other way, for a request cryod passes on (to another node's cryod); the deadline goes as
// the call's.
v1::CheckpointRequest ToProto(const engine::CheckpointRequest& r);
v1::CheckpointJobRequest ToProto(const engine::JobCheckpointRequest& r);

v1::Stage ToProto(engine::Stage s);
v1::Progress ToProto(const engine::Progress& p);
// The listing form (no files); `with_files` adds files and the manifest JSON (GetCheckpoint).
v1::CheckpointInfo ToProto(const store::Manifest& m, bool with_files);
v1::CheckpointInfo ToProto(const engine::CheckpointRecord& r, bool with_files);
v1::CheckpointInfo ToProto(const engine::CheckpointResult& r);
v1::JobCheckpointInfo ToProto(const engine::JobCheckpointResult& r);
v1::GpuCutWord ToProto(int round, const gpu::CutWord& w);
gpu::CutWord FromProto(const v1::GpuCutWord& w);
// Bounds of a ListCheckpoints answer: clients take 4 MiB by default (gRPC), and one manifest
// from a shared store must not make the list fail for everyone.
inline constexpr size_t kMaxListBytes = 3u << 20;
inline constexpr size_t kMaxListEntryBytes = 64u << 10;
// The list answer, newest first as given. An entry larger than kMaxListEntryBytes is sent
// without its pid list (root_pid stays); entries past kMaxListBytes are counted in `omitted`.
v1::ListCheckpointsResponse ToListResponse(const std::vector<engine::CheckpointRecord>& records);
v1::RestoreResult ToProto(const engine::RestoreResult& r);
v1::NodeInfoResponse ToProto(const engine::NodeFacts& n,
                             const std::vector<std::shared_ptr<engine::Operation>>& running);
// The final event of an operation that ended well.
v1::OperationEvent ResultEvent(const std::string& op_id, const engine::OperationResult& r);

}  // namespace cryo::service
