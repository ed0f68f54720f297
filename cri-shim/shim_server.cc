#include "cri-shim/shim_server.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "cri-shim/proxy_call.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "lib/base/log.h"

namespace cryo::shim {

ShimServer::ShimServer(ShimServerOptions options) : options_(std::move(options)) {}

absl::Status PrepareSocketPath(const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a socket"));
    }
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    bool live = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    if (live) {
      return absl::AlreadyExistsError(
          absl::StrCat("another server is listening on ", path, " (a second shim?)"));
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(
          absl::StrCat("removing stale socket ", path, ": ", strerror(errno)));
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("creating the directory of ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShimServer>> ShimServer::Create(const ShimServerOptions& options,
                                                               OwnedMethods owned,
                                                               ShimMetrics* metrics) {
  auto server = std::unique_ptr<ShimServer>(new ShimServer(options));
  server->owned_ = std::move(owned);

  absl::StatusOr<std::unique_ptr<RuntimeConnection>> runtime =
      RuntimeConnection::Create(options.runtime_endpoint);
  if (!runtime.ok()) return runtime.status();
  server->runtime_ = std::move(*runtime);
  server->observer_ = std::make_unique<CallObserver>(metrics, server->runtime_->endpoint());

  if (absl::Status st = PrepareSocketPath(options.listen_path); !st.ok()) return st;

  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("unix:", options.listen_path),
                           grpc::InsecureServerCredentials(), &bound);
  server->engine_ = std::make_unique<ProxyEngine>(
      ProxyDeps{server->runtime_.get(), server->observer_.get(), &server->runner_, &server->owned_,
                server->in_flight_},
      builder);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || bound == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on unix:", options.listen_path));
  }
  server->engine_->Start(options.threads);
  // kubelet runs as root; nobody else may drive containers through us.
  if (::chmod(options.listen_path.c_str(), 0660) != 0) {
    CRYO_LOG(Warning) << "chmod " << options.listen_path << ": " << strerror(errno);
  }
  return server;
}

void ShimServer::Shutdown(absl::Duration grace) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  absl::Time deadline = absl::Now() + grace;
  // No new connections; calls on existing ones may still arrive and are served.
  ::unlink(options_.listen_path.c_str());
  if (!in_flight_->AwaitNone(grace)) {
    CRYO_LOG(Warning) << "calls still in flight after " << absl::FormatDuration(grace)
                      << "; cancelling them";
  }
  // Not Shutdown(deadline): with kubelet's idle connection open, gRPC would wait the whole
  // deadline even with nothing in flight.
  server_->Shutdown(absl::ToChronoTime(absl::Now()));
  engine_->Stop(std::max(deadline - absl::Now(), absl::Seconds(1)));
  if (!runner_.Drain(std::max(deadline - absl::Now(), absl::Seconds(1)))) {
    CRYO_LOG(Warning) << "owned handlers still running after shutdown";
  }
}

ShimServer::~ShimServer() {
  Shutdown(absl::Seconds(5));
  server_.reset();  // before the engine's completion queue
  engine_.reset();
}

}  // namespace cryo::shim
