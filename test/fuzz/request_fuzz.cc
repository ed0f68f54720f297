// What a client sends over the socket: a CheckpointRequest or RestoreRequest message (the first
// byte picks which), converted as the gRPC layer converts it and validated as the engine does
// before anything reads it. Nothing may crash; an accepted request holds to the bounds.

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/time/time.h"
#include "cryo/v1/cryo.pb.h"
#include "daemon/engine/validate.h"
#include "daemon/service/convert.h"
#include "google/protobuf/stubs/logging.h"
#include "lib/base/ids.h"
#include "lib/base/limits.h"

// Protobuf logs every string that is not UTF-8 at length: silence, not a finding.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const absl::Time deadline = absl::UnixEpoch() + absl::Hours(1);
  if (data[0] & 1) {
    cryo::v1::CheckpointRequest r;
    if (!r.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
    cryo::engine::CheckpointRequest req = cryo::service::FromProto(r, deadline);
    if (!cryo::engine::ValidateRequest(req).ok()) return 0;
    if (!cryo::limits::ValidateLabels(req.labels).ok() ||
        !cryo::limits::ValidateWorkload(req.workload).ok() ||
        (!req.checkpoint_id.empty() && !cryo::ValidateCheckpointId(req.checkpoint_id).ok()) ||
        (req.pid > 0) == !req.container_id.empty()) {
      std::abort();  // accepted beyond the bounds
    }
  } else {
    cryo::v1::RestoreRequest r;
    if (!r.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
    cryo::engine::RestoreRequest req = cryo::service::FromProto(r, deadline);
    if (!cryo::engine::ValidateRequest(req).ok()) return 0;
    if (!cryo::ValidateCheckpointId(req.checkpoint_id).ok() ||
        req.gpu_map.size() > cryo::engine::kMaxGpuMap) {
      std::abort();  // accepted beyond the bounds
    }
  }
  return 0;
}
