#include "cri-shim/proxy_call.h"

#include <atomic>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cri-shim/cri_methods.h"
#include "cri-shim/metadata.h"
#include "grpcpp/support/client_callback.h"

namespace cryo::shim {
namespace {

using grpc::ByteBuffer;

// Both halves of one relayed call.
//
// Two relays:
//  - unary (CRI methods known to be unary): read kubelet's request, make one unary call to the
//    runtime, write its response and status back in one step. Fewest callback hops: this is
//    the path of nearly every call kubelet makes.
//  - streaming (everything else, unknown methods included): a bidi call to the runtime with
//    messages pumped both ways. Each direction has at most one message in flight (read from one
//    side, written to the other, then the next read), which is also the flow control.
//
// Threading: gRPC runs the reactions of both halves on its callback threads, concurrently.
// Decisions are taken under mu_; gRPC operations are started after mu_ is released, because
// gRPC may complete an operation inline and the reaction would take mu_ again.
//
// Lifetime: the downstream half (kubelet's call) always ends with our Finish and its OnDone; the
// upstream half (the runtime call), when started, ends with its completion. The object is
// deleted when both are done (refs_). Streaming relay: operations on the upstream call that
// start outside its own reactions are covered by two holds, one while kubelet may still send
// requests, one while kubelet may still take responses.
class ProxyCall {
 public:
  ProxyCall(grpc::GenericCallbackServerContext* ctx, const ProxyDeps& deps, OwnedMethod* owned)
      : ctx_(ctx), deps_(deps), owned_(owned), down_(this), up_(this) {}

  ~ProxyCall() {
    if (unary_) deps_.in_flight->Exit();
  }

  grpc::ServerGenericBidiReactor* Begin() {
    MethodInfo info = ClassifyMethod(ctx_->method());
    // Owned methods are unary CRI calls by construction.
    unary_ = info.unary || owned_ != nullptr;
    if (unary_) deps_.in_flight->Enter();
    call_ = deps_.observer->Begin(ctx_->method(), info.label);
    if (unary_) {
      absl::MutexLock lock(&mu_);
      awaiting_request_ = true;
    } else {
      StartStreamingUpstream();  // connect while kubelet's first message is on its way
    }
    down_.StartRead(&down_buf_);
    return &down_;
  }

 private:
  class Downstream : public grpc::ServerGenericBidiReactor {
   public:
    explicit Downstream(ProxyCall* call) : call_(call) {}
    void OnReadDone(bool ok) override { call_->OnDownstreamRead(ok); }
    void OnWriteDone(bool ok) override { call_->OnDownstreamWrite(ok); }
    void OnCancel() override { call_->OnDownstreamCancel(); }
    void OnDone() override { call_->Unref(); }

   private:
    ProxyCall* call_;
  };

  class Upstream : public grpc::ClientBidiReactor<ByteBuffer, ByteBuffer> {
   public:
    explicit Upstream(ProxyCall* call) : call_(call) {}
    void OnReadInitialMetadataDone(bool ok) override { call_->OnUpstreamHeaders(ok); }
    void OnReadDone(bool ok) override { call_->OnUpstreamRead(ok); }
    void OnWriteDone(bool ok) override { call_->OnUpstreamWrite(ok); }
    void OnDone(const grpc::Status& status) override { call_->OnUpstreamDone(status); }

   private:
    ProxyCall* call_;
  };

  CallPath path() const { return owned_ == nullptr ? CallPath::kForwarded : CallPath::kOwned; }

  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // Marks the upstream call as started unless kubelet already gave up, in which case the
  // downstream call is finished here and false returned.
  bool ClaimUpstream(bool streaming) {
    {
      absl::MutexLock lock(&mu_);
      if (!cancelled_.load()) {
        upstream_started_ = true;
        send_hold_ = streaming;
        receive_hold_ = streaming;
      }
    }
    if (!upstream_started_) {
      FinishDownstream(grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled"), false);
      return false;
    }
    refs_.fetch_add(1, std::memory_order_relaxed);
    if (ctx_->deadline() != std::chrono::system_clock::time_point::max()) {
      upstream_ctx_.set_deadline(ctx_->deadline());
    }
    for (const auto& [key, value] : ForwardableMetadata(ctx_->client_metadata())) {
      upstream_ctx_.AddMetadata(key, value);
    }
    return true;
  }

  // --- unary relay ---------------------------------------------------------------------------

  // Sends down_buf_ (kubelet's request, byte for byte) to the runtime as one unary call.
  void StartUnaryUpstream() {
    if (!ClaimUpstream(/*streaming=*/false)) return;
    deps_.runtime->generic().UnaryCall(&upstream_ctx_, call_.method, grpc::StubOptions(),
                                       &down_buf_, &up_buf_,
                                       [this](grpc::Status status) { OnUnaryDone(status); });
  }

  void OnUnaryDone(const grpc::Status& status) {
    CopyResponseMetadata();
    bool unreachable =
        status.error_code() == grpc::StatusCode::UNAVAILABLE && !deps_.runtime->Connected();
    grpc::Status out = deps_.observer->End(call_, path(), status, unreachable);
    if (out.ok()) {
      down_.StartWriteAndFinish(&up_buf_, grpc::WriteOptions(), out);
    } else {
      down_.Finish(out);
    }
    Unref();
  }

  // --- streaming relay -----------------------------------------------------------------------

  bool StartStreamingUpstream() {
    if (!ClaimUpstream(/*streaming=*/true)) return false;
    deps_.runtime->generic().PrepareBidiStreamingCall(&upstream_ctx_, call_.method,
                                                      grpc::StubOptions(), &up_);
    up_.AddMultipleHolds(2);
    up_.StartCall();
    return true;
  }

  void OnDownstreamRead(bool ok) {
    enum { kNothing, kWrite, kClose, kUnary, kHandle, kForwardEmpty } action = kNothing;
    bool release_send_hold = false;
    {
      absl::MutexLock lock(&mu_);
      if (awaiting_request_) {
        awaiting_request_ = false;
        if (!ok) {
          action = kForwardEmpty;
        } else {
          action = owned_ != nullptr ? kHandle : kUnary;
        }
      } else if (ok) {
        if (!send_closed_) {
          upstream_write_in_flight_ = true;
          action = kWrite;
        }
        // Else the runtime already finished the call: drop the message, read no further.
      } else if (!send_closed_) {
        send_closed_ = true;
        action = kClose;
        release_send_hold = TakeSendHoldLocked();
      }
    }
    switch (action) {
      case kNothing:
        break;
      case kWrite:
        up_.StartWrite(&down_buf_);
        break;
      case kClose:
        up_.StartWritesDone();
        break;
      case kUnary:
        StartUnaryUpstream();
        break;
      case kHandle:
        request_ = down_buf_;
        deps_.runner->Run([this] { RunOwnedHandler(); });
        break;
      case kForwardEmpty:
        // kubelet half-closed without a request (or gave up): let the runtime answer that.
        if (StartStreamingUpstream()) {
          {
            absl::MutexLock lock(&mu_);
            send_closed_ = true;
            release_send_hold = TakeSendHoldLocked();
          }
          up_.StartWritesDone();
        }
        break;
    }
    if (release_send_hold) up_.RemoveHold();
  }

  void OnDownstreamWrite(bool ok) {
    if (ok) {
      up_.StartRead(&up_buf_);  // the receive hold keeps the upstream call alive
      return;
    }
    // kubelet is gone: stop relaying responses and end the runtime call.
    upstream_ctx_.TryCancel();
    bool release = false;
    {
      absl::MutexLock lock(&mu_);
      release = std::exchange(receive_hold_, false);
    }
    if (release) up_.RemoveHold();
  }

  void OnDownstreamCancel() {
    bool started;
    {
      absl::MutexLock lock(&mu_);
      cancelled_.store(true);
      started = upstream_started_;
    }
    if (started) upstream_ctx_.TryCancel();
  }

  void OnUpstreamHeaders(bool ok) {
    if (ok) {
      // Nothing was written to kubelet yet, so its response headers are still open.
      for (const auto& [key, value] :
           ForwardableMetadata(upstream_ctx_.GetServerInitialMetadata())) {
        ctx_->AddInitialMetadata(key, value);
      }
    }
    // Reading only after the headers keeps them ahead of the first message.
    up_.StartRead(&up_buf_);
  }

  void OnUpstreamRead(bool ok) {
    if (ok) {
      down_.StartWrite(&up_buf_);
      return;
    }
    // The runtime has sent everything: requests still coming from kubelet have nowhere to go.
    bool release_send = false;
    bool release_receive = false;
    {
      absl::MutexLock lock(&mu_);
      send_closed_ = true;
      release_send = TakeSendHoldLocked();
      release_receive = std::exchange(receive_hold_, false);
    }
    if (release_send) up_.RemoveHold();
    if (release_receive) up_.RemoveHold();
  }

  void OnUpstreamWrite(bool ok) {
    bool read_more = false;
    bool release_send = false;
    {
      absl::MutexLock lock(&mu_);
      upstream_write_in_flight_ = false;
      if (!ok) send_closed_ = true;
      read_more = !send_closed_;
      release_send = TakeSendHoldLocked();
    }
    if (read_more) down_.StartRead(&down_buf_);
    if (release_send) up_.RemoveHold();
  }

  void OnUpstreamDone(const grpc::Status& status) {
    for (const auto& [key, value] :
         ForwardableMetadata(upstream_ctx_.GetServerTrailingMetadata())) {
      ctx_->AddTrailingMetadata(key, value);
    }
    bool unreachable =
        status.error_code() == grpc::StatusCode::UNAVAILABLE && !deps_.runtime->Connected();
    FinishDownstream(status, unreachable);
    Unref();
  }

  // Whether the send hold can go now: no further upstream writes will be started from outside
  // the upstream reactions.
  bool TakeSendHoldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (send_hold_ && send_closed_ && !upstream_write_in_flight_) {
      send_hold_ = false;
      return true;
    }
    return false;
  }

  // --- shared --------------------------------------------------------------------------------

  // Unary relay: the runtime's headers and trailers, for kubelet.
  void CopyResponseMetadata() {
    for (const auto& [key, value] : ForwardableMetadata(upstream_ctx_.GetServerInitialMetadata())) {
      ctx_->AddInitialMetadata(key, value);
    }
    for (const auto& [key, value] :
         ForwardableMetadata(upstream_ctx_.GetServerTrailingMetadata())) {
      ctx_->AddTrailingMetadata(key, value);
    }
  }

  // The last thing done on the downstream call; `this` may be gone when it returns.
  void FinishDownstream(const grpc::Status& status, bool unreachable) {
    grpc::Status out = deps_.observer->End(call_, path(), status, unreachable);
    down_.Finish(out);
  }

  // Runs on a handler thread.
  void RunOwnedHandler() {
    CallContext cctx(call_.method, ctx_->deadline(), ForwardableMetadata(ctx_->client_metadata()),
                     &cancelled_, deps_.runtime);
    OwnedResult result = owned_->Handle(cctx, request_);
    switch (result.kind()) {
      case OwnedResult::Kind::kForward:
        deps_.observer->OwnedDecision(call_, "forward");
        StartUnaryUpstream();  // the request exactly as kubelet sent it (down_buf_)
        return;
      case OwnedResult::Kind::kReply: {
        deps_.observer->OwnedDecision(call_, "reply");
        reply_ = std::move(result.response());
        grpc::Status out = deps_.observer->End(call_, path(), grpc::Status::OK, false);
        down_.StartWriteAndFinish(&reply_, grpc::WriteOptions(), out);
        return;
      }
      case OwnedResult::Kind::kFail:
        deps_.observer->OwnedDecision(call_, "fail");
        FinishDownstream(ToGrpcStatus(result.status()), false);
        return;
    }
  }

  grpc::GenericCallbackServerContext* const ctx_;
  const ProxyDeps deps_;
  OwnedMethod* const owned_;
  CallObserver::Call call_;
  bool unary_ = false;  // a unary CRI call (counted in InFlightCalls); set once in Begin

  Downstream down_;
  Upstream up_;
  grpc::ClientContext upstream_ctx_;
  ByteBuffer down_buf_;  // kubelet -> runtime, one message at a time
  ByteBuffer up_buf_;    // runtime -> kubelet, one message at a time
  ByteBuffer request_;   // the request an owned handler decodes
  ByteBuffer reply_;     // an owned handler's own answer

  std::atomic<int> refs_{1};
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  bool awaiting_request_ ABSL_GUARDED_BY(mu_) = false;
  bool upstream_started_ = false;  // written under mu_ before any upstream reaction can run
  bool send_hold_ ABSL_GUARDED_BY(mu_) = false;
  bool receive_hold_ ABSL_GUARDED_BY(mu_) = false;
  bool send_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool upstream_write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerGenericBidiReactor* StartProxyCall(grpc::GenericCallbackServerContext* ctx,
                                               const ProxyDeps& deps, OwnedMethod* owned) {
  return (new ProxyCall(ctx, deps, owned))->Begin();
}

}  // namespace cryo::shim
