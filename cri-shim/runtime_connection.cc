#include "cri-shim/runtime_connection.h"

#include "cri-shim/flags.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace cryo::shim {

absl::StatusOr<std::unique_ptr<RuntimeConnection>> RuntimeConnection::Create(
    absl::string_view endpoint) {
  absl::StatusOr<std::string> target = NormalizeUnixEndpoint(endpoint);
  if (!target.ok()) return target.status();

  grpc::ChannelArguments args;
  // Message size limits belong to kubelet and the runtime, not to the pipe between them.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // A restarted runtime must be picked up within about a second, not after gRPC's default
  // backoff of up to two minutes. Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: in this gRPC it is
  // also the connect timeout, and a busy runtime that is slow to send its HTTP/2 settings
  // would then be dropped and reported unavailable.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Per-call bookkeeping the shim never reads. (gRPC's transparent retries stay on: they only
  // resend what never reached the runtime, and cover races with a closing connection.)
  args.SetInt(GRPC_ARG_ENABLE_CHANNELZ, 0);
  // Our own connection, never shared with another channel in the process (tests run several).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);

  auto conn = std::unique_ptr<RuntimeConnection>(new RuntimeConnection());
  conn->endpoint_ = *target;
  conn->channel_ = grpc::CreateCustomChannel(*target, grpc::InsecureChannelCredentials(), args);
  if (conn->channel_ == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a channel to ", *target));
  }
  conn->generic_ = std::make_unique<grpc::GenericStub>(conn->channel_);
  conn->runtime_ = runtime::v1::RuntimeService::NewStub(conn->channel_);
  conn->images_ = runtime::v1::ImageService::NewStub(conn->channel_);
  return conn;
}

bool RuntimeConnection::Connected() const {
  return channel_->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY;
}

}  // namespace cryo::shim
