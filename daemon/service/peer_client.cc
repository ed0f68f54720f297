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
absl::StatusOr<std::vector<engine::CheckpointResult>> GrpcJobPeers::Join(
    const std::string& node, const engine::JobCheckpointRequest& members, engine::JobCut& cut) {
  const std::string party = absl::StrCat("node ", node);
  auto fail = [&](absl::Status s) {
    cut.Fail(party, s);
    return s;
  };
  std::string address;
  if (auto it = addresses_.find(node); it != addresses_.end()) {
    address = it->second;
  } else if (lookup_) {
    auto found = lookup_(node);
    if (!found.ok()) {
      return fail(Annotate(found.status(), absl::StrCat("finding node ", node, "'s cryod")));
    }
    address = *found;
  } else {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("no address for node ", node, "'s cryod (cryod's peers)")));
  }
  grpc::ChannelArguments args;
  SetPeerKeepalive(&args);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Peer::NewStub(channel);
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
        absl::StrCat("node ", node, "'s cryod at ", address, ": ", s.error_message())));
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
  if (!stream->Read(&reply)) return fail(ended("before its members were dumped"));
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
    r.manifest.job = store::JobPart{members.namespace_, members.job, members.id, p.job_member()};
    out.push_back(std::move(r));
  }
  if (!fin.ok()) CRYO_LOG(Warning) << "node " << node << "'s cryod: " << fin.error_message();
  return out;
}

}  // namespace cryo::service
