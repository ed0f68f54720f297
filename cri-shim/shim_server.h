// cryo-cri-shim's gRPC server: one unix socket, every method served by the generic forwarder
// or by an owned handler.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cri-shim/call_observer.h"
#include "cri-shim/handler_runner.h"
#include "cri-shim/owned_method.h"
#include "cri-shim/proxy_call.h"
#include "cri-shim/runtime_connection.h"
#include "grpcpp/server.h"

namespace cryo::shim {

struct ShimServerOptions {
  std::string listen_path;       // unix socket path to serve on
  std::string runtime_endpoint;  // unix:///path of containerd or CRI-O
  // Completion-queue polling threads. One is the fastest here (no handoffs between them) and
  // serves thousands of calls a second, far more than kubelet makes.
  int threads = 1;
};

class ShimServer {
 public:
  // Binds the socket and starts serving. A stale socket file left by a dead shim is replaced;
  // a live one is an error. metrics may be null.
  static absl::StatusOr<std::unique_ptr<ShimServer>> Create(const ShimServerOptions& options,
                                                            OwnedMethods owned,
                                                            ShimMetrics* metrics);
  ~ShimServer();

  // Removes the socket, gives unary calls in flight up to `grace` to finish, then cancels what
  // is left (streams) and closes every connection.
  void Shutdown(absl::Duration grace);

  const std::string& listen_path() const { return options_.listen_path; }
  RuntimeConnection& runtime() { return *runtime_; }

 private:
  explicit ShimServer(ShimServerOptions options);

  ShimServerOptions options_;
  OwnedMethods owned_;
  std::unique_ptr<RuntimeConnection> runtime_;
  std::unique_ptr<CallObserver> observer_;
  HandlerRunner runner_;
  std::shared_ptr<InFlightCalls> in_flight_ = std::make_shared<InFlightCalls>();
  std::unique_ptr<ProxyEngine> engine_;  // outlives server_: it owns the completion queue
  std::unique_ptr<grpc::Server> server_;
  bool shut_down_ = false;
};

// Makes `path` free for a new listening socket: refuses if a live server answers there or the
// path is not a socket, removes a stale socket file, creates missing parent directories.
absl::Status PrepareSocketPath(const std::string& path);

}  // namespace cryo::shim
