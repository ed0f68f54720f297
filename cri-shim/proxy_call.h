// One CRI call through the shim: the generic forwarder, and the entry to owned handlers.
//
// Every call, whatever its shape (unary, client/server streaming, bidi), is relayed as raw
// message bytes over a bidi-streaming call to the runtime: gRPC's wire format does not depend on
// the method's shape, so unknown and future methods forward too. Request metadata and the
// deadline go upstream; response headers, messages, trailers and the status come back.
#pragma once

#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cri-shim/call_observer.h"
#include "cri-shim/handler_runner.h"
#include "cri-shim/owned_method.h"
#include "cri-shim/runtime_connection.h"
#include "grpcpp/generic/async_generic_service.h"

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
  // Shared: a call's last reference may drop after the server considers it done.
  std::shared_ptr<InFlightCalls> in_flight;
};

// Creates the reactor for one incoming call; it deletes itself when the call is over. owned is
// the call's owned handler, or null to forward.
grpc::ServerGenericBidiReactor* StartProxyCall(grpc::GenericCallbackServerContext* ctx,
                                               const ProxyDeps& deps, OwnedMethod* owned);

}  // namespace cryo::shim
