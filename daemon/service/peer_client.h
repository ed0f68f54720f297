#pragma once

// engine::JobPeers over the cryo.v1.Peer service: the driving cryod's side of a job checkpoint
// that spans nodes (peer_service.h is the other side). A node's cryod is found by name in the
// configured addresses (cryod's `peers`); every call carries the nodes' shared token.

#include <map>
#include <string>

#include "daemon/engine/job_peers.h"

namespace cryo::service {

class GrpcJobPeers final : public engine::JobPeers {
 public:
  // `addresses`: node name -> "host:port" of its cryod's peer_listen.
  GrpcJobPeers(std::map<std::string, std::string> addresses, std::string token)
      : addresses_(std::move(addresses)), token_(std::move(token)) {}

  absl::StatusOr<std::vector<engine::CheckpointResult>> Join(
      const std::string& node, const engine::JobCheckpointRequest& members,
      engine::JobCut& cut) override;

 private:
  std::map<std::string, std::string> addresses_;
  std::string token_;
};

}  // namespace cryo::service
