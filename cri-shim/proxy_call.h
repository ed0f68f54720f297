// One CRI call through the shim: the generic forwarder, and the entry to owned handlers.
//
// Every call, whatever its shape (unary, client/server streaming, bidi), is relayed as raw
// message bytes over a bidi-streaming call to the runtime: gRPC's wire format does not depend on
// the method's shape, so unknown and future methods forward too. Request metadata and the
// deadline go upstream; response headers, messages, trailers and the status come back.
#pragma once

#include "cri-shim/call_observer.h"
#include "cri-shim/handler_runner.h"
#include "cri-shim/owned_method.h"
#include "cri-shim/runtime_connection.h"
#include "grpcpp/generic/async_generic_service.h"

namespace cryo::shim {

struct ProxyDeps {
  RuntimeConnection* runtime;
  CallObserver* observer;
  HandlerRunner* runner;
};

// Creates the reactor for one incoming call; it deletes itself when the call is over. owned is
// the call's owned handler, or null to forward.
grpc::ServerGenericBidiReactor* StartProxyCall(grpc::GenericCallbackServerContext* ctx,
                                               const ProxyDeps& deps, OwnedMethod* owned);

}  // namespace cryo::shim
