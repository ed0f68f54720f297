#pragma once

// The cryo.v1.Peer service: another node's cryod driving a job checkpoint asks this one for the
// job's members that run here (issue 37; docs/architecture.md, "Job checkpoints"). Served on
// peer_listen (TCP). Every call must carry the nodes' shared token; a member must be a container
// whose pod says it is that member of that job (Engine::CheckJobMember), or a process when this
// node allows process members from peers (tests, nodes without Kubernetes).

#include <grpcpp/grpcpp.h>

#include <string>

#include "cryo/v1/cryo.grpc.pb.h"
#include "daemon/engine/engine.h"

namespace cryo::service {

struct PeerOptions {
  std::string token;  // what every call must carry ("authorization: Bearer <token>")
  bool allow_process_members = false;
};

class PeerService final : public v1::Peer::Service {
 public:
  PeerService(engine::Engine* engine, PeerOptions opts) : engine_(engine), opts_(std::move(opts)) {}

  grpc::Status JoinJobCheckpoint(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::PeerCutReply, v1::PeerCutMessage>* stream) override;
  grpc::Status ListJobMembers(grpc::ServerContext* ctx, const v1::ListJobMembersRequest* req,
                              v1::ListJobMembersResponse* resp) override;

 private:
  grpc::Status Authenticate(grpc::ServerContext* ctx) const;

  engine::Engine* engine_;
  PeerOptions opts_;
};

// Keepalive on both ends of a Peer call: a job checkpoint's stream waits for a node's members
// and for the driver's word, and a node that vanishes without closing it (its machine gone, a
// partition) must end that wait, not hold every other member frozen. Pings every 10 s, dead
// after 10 s more; the server allows them.
void SetPeerKeepalive(grpc::ChannelArguments* args);
void SetPeerKeepalive(grpc::ServerBuilder* builder);

// The header a peer call carries.
inline constexpr char kPeerAuthHeader[] = "authorization";
std::string PeerAuthValue(const std::string& token);

}  // namespace cryo::service
