#pragma once

// The engine's domain types <-> the cryo.v1 API messages: the one place that knows both.

#include <string>

#include "cryo/v1/cryo.pb.h"
#include "daemon/engine/operation.h"
#include "daemon/engine/types.h"

namespace cryo::service {

engine::CheckpointRequest FromProto(const v1::CheckpointRequest& r, absl::Time deadline);
engine::RestoreRequest FromProto(const v1::RestoreRequest& r, absl::Time deadline);

v1::Stage ToProto(engine::Stage s);
v1::Progress ToProto(const engine::Progress& p);
// The listing form (no files); `with_files` adds files and the manifest JSON (GetCheckpoint).
v1::CheckpointInfo ToProto(const store::Manifest& m, bool with_files);
v1::CheckpointInfo ToProto(const engine::CheckpointRecord& r, bool with_files);
v1::CheckpointInfo ToProto(const engine::CheckpointResult& r);
v1::RestoreResult ToProto(const engine::RestoreResult& r);
v1::NodeInfoResponse ToProto(const engine::NodeFacts& n,
                             const std::vector<std::shared_ptr<engine::Operation>>& running);
// The final event of an operation that ended well.
v1::OperationEvent ResultEvent(const std::string& op_id, const engine::OperationResult& r);

}  // namespace cryo::service
