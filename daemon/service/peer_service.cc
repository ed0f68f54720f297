#include "daemon/service/peer_service.h"

#include <openssl/crypto.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/engine/operation.h"
#include "daemon/service/convert.h"
#include "lib/base/grpc_status.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"

namespace cryo::service {

std::string PeerAuthValue(const std::string& token) { return absl::StrCat("Bearer ", token); }

namespace {
constexpr int kPeerPingMs = 10000;
constexpr int kPeerPingTimeoutMs = 10000;
}  // namespace

void SetPeerKeepalive(grpc::ChannelArguments* args) {
  args->SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kPeerPingMs);
  args->SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kPeerPingTimeoutMs);
  args->SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args->SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

void SetPeerKeepalive(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kPeerPingMs);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kPeerPingTimeoutMs);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // The driver's pings while a node's members dump are no abuse.
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              kPeerPingMs / 2);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

grpc::Status PeerService::Authenticate(grpc::ServerContext* ctx) const {
  if (opts_.token.empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this cryod has no peer token (peer_token_file): it serves no peer");
  }
  const std::string want = PeerAuthValue(opts_.token);
  const auto& md = ctx->client_metadata();
  auto it = md.find(kPeerAuthHeader);
  if (it == md.end() || it->second.size() != want.size() ||
      CRYPTO_memcmp(it->second.data(), want.data(), want.size()) != 0) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "a peer call must carry the nodes' token (peer_token_file)");
  }
  return grpc::Status::OK;
}

grpc::Status PeerService::JoinJobCheckpoint(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::PeerCutReply, v1::PeerCutMessage>* stream) {
  if (grpc::Status a = Authenticate(ctx); !a.ok()) return a;
  v1::PeerCutMessage first;
  if (!stream->Read(&first) || !first.has_start()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a job checkpoint begins with start");
  }
  engine::JobCheckpointRequest req = FromProto(first.start(), DeadlineOf(ctx));
  if (req.id.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "start names no job checkpoint id");
  }
  // Only the job's members, as their pods say: a token lets a peer ask for those, nothing else.
  for (const auto& m : req.members) {
    if (m.req.container_id.empty()) {
      if (!opts_.allow_process_members) {
        return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                            absl::StrCat("member ", m.member.substr(0, 64),
                                         " is a process; this node takes only containers whose "
                                         "pods are members of the job from its peers"));
      }
      continue;
    }
    absl::Status s = engine_->CheckJobMember(m.req.container_id, req.namespace_, req.job, m.member);
    if (!s.ok()) return ToGrpc(s);
  }
  CRYO_LOG(Info) << "peer " << ctx->peer() << " drives job checkpoint " << req.id << " of "
                 << req.namespace_ << "/" << req.job << ": " << req.members.size()
                 << " member(s) here";
  engine::Operation op(absl::StrCat("peer-", RandomHex(6)), "checkpoint-job",
                       absl::StrCat("job ", req.namespace_, "/", req.job));
  absl::Mutex write_mu;
  auto write = [&](const v1::PeerCutReply& r) {
    absl::MutexLock l(&write_mu);
    return stream->Write(r);
  };
  // The GPU cut's rounds: this node's word goes to the driver, whose next message is the job's.
  // (Rounds come before the cut, so the stream's reads here and the word's wait below never
  // overlap.)
  auto gpu_up = [&](int round, const gpu::CutWord& w) -> absl::StatusOr<gpu::CutWord> {
    v1::PeerCutReply r;
    *r.mutable_gpu_round() = ToProto(round, w);
    if (!write(r)) return absl::UnavailableError("the driving node went away at the GPU cut");
    v1::PeerCutMessage m;
    if (!stream->Read(&m)) return absl::AbortedError("the driving node went away at the GPU cut");
    if (m.has_abort())
      return absl::AbortedError(absl::StrCat("the driving node aborted: ", m.abort()));
    if (!m.has_gpu_round() || m.gpu_round().round() != static_cast<uint32_t>(round)) {
      return absl::AbortedError(
          absl::StrCat("the driving node did not answer round ", round, " of the GPU cut"));
    }
    return FromProto(m.gpu_round());
  };
  auto gpu_left = [&] {
    v1::PeerCutReply r;
    r.set_gpu_left(true);
    write(r);
  };
  auto res = engine_->CheckpointJobMembers(
      req, op,
      [&](const absl::Status& at) {
        v1::PeerCutReply r;
        if (at.ok()) {
          r.set_at_cut(true);
        } else {
          r.set_failed(std::string(at.message()));
        }
        write(r);
      },
      [&]() -> absl::Status {
        v1::PeerCutMessage m;
        if (!stream->Read(&m)) {
          return absl::AbortedError("the driving node went away before its word");
        }
        if (m.has_go() && m.go()) return absl::OkStatus();
        return absl::AbortedError(
            absl::StrCat("the driving node aborted: ", m.has_abort() ? m.abort() : "no go"));
      },
      gpu_up, gpu_left);
  v1::PeerCutReply done;
  if (!res.ok()) {
    done.set_failed(std::string(res.status().message()));
    write(done);
    return grpc::Status::OK;
  }
  v1::JobCheckpointInfo* info = done.mutable_done();
  info->set_job_checkpoint_id(req.id);
  info->set_namespace_(req.namespace_);
  info->set_job(req.job);
  for (const auto& p : *res) *info->add_parts() = ToProto(p);
  write(done);
  return grpc::Status::OK;
}

grpc::Status PeerService::ListJobMembers(grpc::ServerContext* ctx,
                                         const v1::ListJobMembersRequest* req,
                                         v1::ListJobMembersResponse* resp) {
  if (grpc::Status a = Authenticate(ctx); !a.ok()) return a;
  auto members = engine_->LocalJobMembers(req->namespace_(), req->job());
  if (!members.ok()) return ToGrpc(members.status());
  for (const auto& m : *members) {
    v1::JobMember* jm = resp->add_members();
    jm->set_member(m.member);
    jm->set_node(m.node);
    jm->mutable_checkpoint()->set_container_id(m.req.container_id);
  }
  return grpc::Status::OK;
}

}  // namespace cryo::service
