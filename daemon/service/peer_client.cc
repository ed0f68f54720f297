#include "daemon/service/peer_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cryo/v1/cryo.grpc.pb.h"
#include "daemon/engine/job_cut.h"
#include "daemon/service/convert.h"
#include "daemon/service/peer_service.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace cryo::service {

absl::StatusOr<std::string> GrpcJobPeers::Address(const std::string& node) const {
  if (auto it = addresses_.find(node); it != addresses_.end()) return it->second;
  if (!lookup_) {
    return absl::FailedPreconditionError(
        absl::StrCat("no address for node ", node, "'s cryod (cryod's peers)"));
  }
  auto found = lookup_(node);
  if (!found.ok()) return Annotate(found.status(), absl::StrCat("finding node ", node, "'s cryod"));
  return found;
}

std::unique_ptr<v1::Peer::Stub> GrpcJobPeers::Stub(const std::string& address) const {
  grpc::ChannelArguments args;
  SetPeerKeepalive(&args);
  const PeerTls* tls = tls_ ? &*tls_ : nullptr;
  SetPeerTlsTarget(tls, &args);
  return v1::Peer::NewStub(grpc::CreateCustomChannel(address, PeerChannelCredentials(tls), args));
}

absl::StatusOr<std::vector<engine::JobCheckpointRequest::Member>> GrpcJobPeers::ListMembers(
    const std::string& ns, const std::string& job) {
  std::vector<engine::JobCheckpointRequest::Member> out;
  v1::ListJobMembersRequest req;
  req.set_namespace_(ns);
  req.set_job(job);
  for (const auto& [node, address] : addresses_) {
    grpc::ClientContext ctx;
    ctx.AddMetadata(kPeerAuthHeader, PeerAuthValue(token_));
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    v1::ListJobMembersResponse resp;
    grpc::Status s = Stub(address)->ListJobMembers(&ctx, req, &resp);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          absl::StrCat("listing job ", ns, "/", job, "'s members on node ", node,
                                       " (", address, "): ", s.error_message()));
    }
    for (const auto& m : resp.members()) {
      // Each node answers for itself: a member another node claims is not taken.
      if (m.node() != node) continue;
      out.push_back({m.member(), engine::CheckpointRequest{}, m.node()});
      out.back().req.container_id = m.checkpoint().container_id();
    }
  }
  return out;
}

absl::StatusOr<std::vector<engine::CheckpointResult>> GrpcJobPeers::Join(
    const std::string& node, const engine::JobCheckpointRequest& members, engine::JobCut& cut) {
  const std::string party = engine::JobGpuCut::NodeParty(node);
  auto fail = [&](absl::Status s) {
    cut.Fail(party, s);
    return s;
  };
  auto address = Address(node);
  if (!address.ok()) return fail(address.status());
  auto stub = Stub(*address);
  grpc::ClientContext ctx;
  ctx.AddMetadata(kPeerAuthHeader, PeerAuthValue(token_));
  if (members.deadline != absl::InfiniteFuture())
    ctx.set_deadline(absl::ToChronoTime(members.deadline));
  auto stream = stub->JoinJobCheckpoint(&ctx);
  v1::PeerCutMessage start;
  *start.mutable_start() = ToProto(members);
  if (!stream->Write(start)) {
    grpc::Status s = stream->Finish();
    return fail(absl::UnavailableError(
        absl::StrCat("node ", node, "'s cryod at ", *address, ": ", s.error_message())));
  }
  v1::PeerCutReply reply;
  auto ended = [&](const std::string& when) {
    stream->WritesDone();
    grpc::Status s = stream->Finish();
    return absl::Status(
        s.ok() ? absl::StatusCode::kUnavailable : static_cast<absl::StatusCode>(s.error_code()),
        absl::StrCat("node ", node, "'s cryod ", when, ": ",
                     s.ok() ? "the call ended" : s.error_message()));
  };
  // Before the cut: the GPU cut's rounds, this node's members' word in each, answered with the
  // job's (JobGpuCut: this node is one party, its cryod speaks for its members).
  engine::JobGpuCut* gpu = cut.gpu();
  const absl::Time gpu_deadline = std::min(members.deadline, absl::Now() + members.cut_timeout);
  for (;;) {
    if (!stream->Read(&reply)) return fail(ended("before its members were dumped"));
    if (reply.has_gpu_left()) {
      if (gpu != nullptr) gpu->Leave(party);
      continue;
    }
    if (!reply.has_gpu_round()) break;
    const uint32_t round = reply.gpu_round().round();
    absl::StatusOr<gpu::CutWord> job = absl::FailedPreconditionError(
        "this cryod's job checkpoint holds no GPU cut to meet node " + node + "'s members at");
    if (gpu != nullptr) {
      job = gpu->Meet(party, static_cast<int>(round), FromProto(reply.gpu_round()), gpu_deadline);
    }
    v1::PeerCutMessage answer;
    if (job.ok()) {
      *answer.mutable_gpu_round() = ToProto(static_cast<int>(round), *job);
    } else {
      answer.set_abort(std::string(job.status().message()));
    }
    if (!stream->Write(answer)) break;  // the Read above says why
  }
  if (!reply.has_at_cut()) {
    return fail(absl::AbortedError(absl::StrCat("node ", node, ": ", reply.failed())));
  }
  cut.Mark(party);
  // Every party at the cut, or the reason the job checkpoint ends: the word passed on.
  absl::Status all = cut.WaitFor(cut.parties(), members.deadline);
  v1::PeerCutMessage word;
  if (all.ok()) {
    word.set_go(true);
  } else {
    word.set_abort(std::string(all.message()));
  }
  stream->Write(word);
  if (!stream->Read(&reply)) return absl::UnavailableError(ended("after the cut").message());
  stream->WritesDone();
  grpc::Status fin = stream->Finish();
  if (!reply.has_done()) {
    return absl::AbortedError(absl::StrCat("node ", node, ": ", reply.failed()));
  }
  std::vector<engine::CheckpointResult> out;
  for (const auto& p : reply.done().parts()) {
    engine::CheckpointResult r;
    r.manifest.id = p.checkpoint_id();
    r.manifest.job =
        store::JobPart{members.namespace_, members.job, members.id, p.job_member(), {}, {}};
    out.push_back(std::move(r));
  }
  if (!fin.ok()) CRYO_LOG(Warning) << "node " << node << "'s cryod: " << fin.error_message();
  return out;
}

}  // namespace cryo::service
