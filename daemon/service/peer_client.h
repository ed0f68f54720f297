#pragma once

// engine::JobPeers over the cryo.v1.Peer service: the driving cryod's side of a job checkpoint
// that spans nodes (peer_service.h is the other side). A node's cryod is found by name in the
// configured addresses (cryod's `peers`); every call carries the nodes' shared token.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "cryo/v1/cryo.grpc.pb.h"
#include "daemon/engine/job_peers.h"
#include "daemon/service/peer_tls.h"

namespace cryo::service {

class GrpcJobPeers final : public engine::JobPeers {
 public:
  // `addresses`: node name -> "host:port" of its cryod's peer_listen; a node not there is asked
  // of `lookup` (the Kubernetes API: the chart's cryod pod on that node), when given.
  using Lookup = std::function<absl::StatusOr<std::string>(const std::string& node)>;
  // `tls`: mutual TLS with the nodes' certificate (peer_tls.h); none: plaintext.
  GrpcJobPeers(std::map<std::string, std::string> addresses, std::string token,
               Lookup lookup = nullptr, std::optional<PeerTls> tls = std::nullopt)
      : addresses_(std::move(addresses)),
        token_(std::move(token)),
        lookup_(std::move(lookup)),
        tls_(std::move(tls)) {}

  absl::StatusOr<std::vector<engine::CheckpointResult>> Join(
      const std::string& node, const engine::JobCheckpointRequest& members,
      engine::JobCut& cut) override;
  // Asks every node in `addresses` (not `lookup`'s: in a cluster the Kubernetes API lists a
  // job's members).
  absl::StatusOr<std::vector<engine::JobCheckpointRequest::Member>> ListMembers(
      const std::string& ns, const std::string& job) override;

 private:
  absl::StatusOr<std::string> Address(const std::string& node) const;
  std::unique_ptr<v1::Peer::Stub> Stub(const std::string& address) const;

  std::map<std::string, std::string> addresses_;
  std::string token_;
  Lookup lookup_;
  std::optional<PeerTls> tls_;
};

}  // namespace cryo::service
