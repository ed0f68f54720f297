// The generic forwarder: relays every CRI call to the runtime, and hands owned methods to their
// handlers.
//
// Every call, whatever its shape, is relayed as raw message bytes: gRPC's wire format does not
// depend on the method's shape, so unknown and future methods forward too. Request metadata
// and the deadline go upstream; response headers, messages, trailers and the status come back.
//
// The engine runs on one completion queue shared by the server side (kubelet's calls) and the
// client side (calls to the runtime), polled by a few threads: the thread that reads a socket
// also runs the step that follows, so a unary call wakes the shim about twice. (gRPC's callback
// API cost about twelve thread switches per call here and four times the latency jitter on a
// busy machine.)
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cri-shim/call_observer.h"
#include "cri-shim/handler_runner.h"
#include "cri-shim/owned_method.h"
#include "cri-shim/runtime_connection.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server_builder.h"

namespace cryo::shim {

// Unary calls being served: shutdown waits for them (streams are cut instead: kubelet's event
// stream never ends by itself).
class InFlightCalls {
 public:
  void Enter() {
    absl::MutexLock lock(&mu_);
    ++count_;
  }
  void Exit() {
    absl::MutexLock lock(&mu_);
    --count_;
  }
  // True if none were left within timeout.
  bool AwaitNone(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto none = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return count_ == 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&none), timeout);
  }

 private:
  absl::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

struct ProxyDeps {
  RuntimeConnection* runtime;
  CallObserver* observer;
  HandlerRunner* runner;
  const OwnedMethods* owned;
  // Shared: a call's last step may run after the server considers it done.
  std::shared_ptr<InFlightCalls> in_flight;
};

class ProxyEngine {
 public:
  // Registers the generic service and the completion queue with `builder`; call before
  // BuildAndStart, then Start.
  ProxyEngine(ProxyDeps deps, grpc::ServerBuilder& builder);
  ~ProxyEngine();

  // Starts accepting calls on `threads` polling threads.
  void Start(int threads);

  // After grpc::Server::Shutdown: waits up to `timeout` for every call to end, then shuts the
  // queue down and joins the threads.
  void Stop(absl::Duration timeout);

  // Internal (used by the calls).
  void Accept();
  void CallEnded();
  bool accepting();
  grpc::ServerCompletionQueue* cq() { return cq_.get(); }
  grpc::AsyncGenericService* service() { return &service_; }
  const ProxyDeps& deps() const { return deps_; }

 private:
  void Poll();

  ProxyDeps deps_;
  grpc::AsyncGenericService service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::vector<std::thread> threads_;

  absl::Mutex mu_;
  bool accepting_ ABSL_GUARDED_BY(mu_) = false;
  int live_calls_ ABSL_GUARDED_BY(mu_) = 0;  // including the one waiting for a new call
  bool stopped_ = false;
};

}  // namespace cryo::shim
