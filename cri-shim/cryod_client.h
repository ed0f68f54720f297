// The shim's client of cryod (cryo/v1 over cryod's unix socket): the few operations owned CRI
// calls need. An interface so handlers are unit-tested with a fake cryod.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cryo/v1/cryo.pb.h"

namespace cryo::shim {

class Cryod {
 public:
  virtual ~Cryod() = default;
  // Run to completion (the streams' last event); deadline bounds the wait.
  virtual absl::StatusOr<v1::CheckpointInfo> Checkpoint(const v1::CheckpointRequest& req,
                                                        absl::Time deadline) = 0;
  // A job checkpoint (every member of a job at one cut, one commit); its parts on success.
  virtual absl::StatusOr<v1::JobCheckpointInfo> CheckpointJob(const v1::CheckpointJobRequest& req,
                                                              absl::Time deadline) = 0;
  virtual absl::StatusOr<v1::RestoreResult> Restore(const v1::RestoreRequest& req,
                                                    absl::Time deadline) = 0;
  virtual absl::StatusOr<v1::CheckpointInfo> Get(const std::string& id) = 0;
  // Newest first.
  virtual absl::StatusOr<std::vector<v1::CheckpointInfo>> List(const std::string& workload) = 0;
  // A checkpoint image of the node's runtime made a checkpoint of cryod's store (verified).
  virtual absl::StatusOr<v1::ImportCheckpointImageResponse> ImportCheckpointImage(
      const std::string& image, absl::Time deadline) = 0;
};

// cryod at `socket_path`; connects lazily (cryod may start after the shim).
std::shared_ptr<Cryod> NewCryodClient(const std::string& socket_path);

}  // namespace cryo::shim
