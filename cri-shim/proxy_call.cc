#include "cri-shim/proxy_call.h"

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "cri-shim/cri_methods.h"
#include "cri-shim/metadata.h"
#include "grpcpp/generic/generic_stub.h"
#include "lib/base/grpc_status.h"
#include "lib/base/log.h"

namespace cryo::shim {
namespace {

using grpc::ByteBuffer;

// The operations of one call; each has at most one instance in flight, so one tag each.
enum Op : int {
  kNew,           // a call arrived (RequestCall)
  kDone,          // the call is over or was cancelled (AsyncNotifyWhenDone)
  kHandler,       // an owned handler is running (not a gRPC op: keeps the call alive)
  kDownRead,      // read from kubelet
  kDownWrite,     // write to kubelet
  kDownFinish,    // status to kubelet
  kUnary,         // unary call to the runtime, through to its status
  kUpStart,       // streaming call to the runtime: started
  kUpHeaders,     // its response headers
  kUpRead,        // read from the runtime
  kUpWrite,       // write to the runtime
  kUpWritesDone,  // half-close towards the runtime
  kUpFinish,      // the runtime's status
  kNumOps,
};

class ProxyCall;

struct Tag {
  ProxyCall* call;
  Op op;
};

// One CRI call through the shim.
//
// Two relays:
//  - unary (CRI methods known to be unary, and owned methods): read kubelet's request, make one
//    unary call to the runtime, write its response and status back in one step;
//  - streaming (everything else, unknown methods included): a bidi call to the runtime with
//    messages pumped both ways, at most one in flight per direction (which is also the flow
//    control).
//
// Completions arrive on any polling thread; mu_ serialises a call's steps. gRPC operations are
// started under mu_ (completions never run inline on a completion queue). The call deletes
// itself once no operation is in flight and kubelet has its status.
class ProxyCall {
 public:
  explicit ProxyCall(ProxyEngine* engine) : engine_(engine), deps_(engine->deps()) {
    for (int i = 0; i < kNumOps; ++i) tags_[i] = {this, static_cast<Op>(i)};
  }

  ~ProxyCall() {
    if (counted_in_flight_) deps_.in_flight->Exit();
    engine_->CallEnded();
  }

  // Waits for the next incoming call.
  void Listen() {
    absl::MutexLock lock(&mu_);
    sctx_.AsyncNotifyWhenDone(&tags_[kDone]);  // counted once the call is matched
    ++pending_;
    engine_->service()->RequestCall(&sctx_, &stream_, engine_->cq(), engine_->cq(), &tags_[kNew]);
  }

  static void Dispatch(void* tag, bool ok) {
    Tag* t = static_cast<Tag*>(tag);
    t->call->OnEvent(t->op, ok);
  }

 private:
  void OnEvent(Op op, bool ok) {
    bool owned_handler = false;
    bool last = false;
    {
      absl::MutexLock lock(&mu_);
      --pending_;
      switch (op) {
        case kNew:
          OnNew(ok);
          break;
        case kDone:
          OnDone();
          break;
        case kDownRead:
          owned_handler = OnDownRead(ok);
          break;
        case kDownWrite:
          OnDownWrite(ok);
          break;
        case kUnary:
          OnUnaryDone();
          break;
        case kUpStart:
          OnUpStart(ok);
          break;
        case kUpHeaders:
          OnUpHeaders(ok);
          break;
        case kUpRead:
          OnUpRead(ok);
          break;
        case kUpWrite:
          OnUpWrite(ok);
          break;
        case kUpFinish:
          OnUpFinish();
          break;
        case kHandler:
        case kDownFinish:
        case kUpWritesDone:
        case kNumOps:
          break;
      }
      if (owned_handler) ++pending_;  // the handler holds the call while it runs
      // Decided under the same lock as the decrement: only the step that ends the last
      // operation sees zero, and nothing can start another after it.
      last = pending_ == 0;
    }
    if (owned_handler) deps_.runner->Run([this] { RunOwnedHandler(); });
    if (last) delete this;
  }

  void Start(Op op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ++pending_; }
  void* tag(Op op) { return &tags_[op]; }

  // --- a call arrives ------------------------------------------------------------------------

  void OnNew(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ok) return;  // server shutting down: never matched, no done tag will come
    ++pending_;       // the done tag
    if (engine_->accepting()) engine_->Accept();
    MethodInfo info = ClassifyMethod(sctx_.method());
    owned_ = deps_.owned->Find(sctx_.method());
    unary_ = info.unary || owned_ != nullptr;
    if (unary_) {
      deps_.in_flight->Enter();
      counted_in_flight_ = true;
    }
    call_ = deps_.observer->Begin(sctx_.method(), info.label);
    if (!unary_) StartStreamingUpstream();  // connect while kubelet's first message comes
    Start(kDownRead);
    stream_.Read(&down_buf_, tag(kDownRead));
  }

  void OnDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (sctx_.IsCancelled()) {
      cancelled_ = true;
      cancelled_flag_.store(true);
      if (upstream_started_) upstream_ctx_.TryCancel();
    }
  }

  // Returns true when an owned handler must run (outside mu_).
  bool OnDownRead(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!got_request_) {
      got_request_ = true;
      if (unary_) {
        if (!ok) {
          // kubelet half-closed without a request or gave up: let the runtime answer that.
          if (StartStreamingUpstream()) CloseUpstreamSend();
          return false;
        }
        if (owned_ != nullptr) {
          request_ = down_buf_;
          return true;
        }
        StartUnaryUpstream();
        return false;
      }
    }
    if (!ok) {
      CloseUpstreamSend();
      return false;
    }
    if (send_closed_) return false;  // the runtime finished: drop it and read no further
    if (!upstream_ready_) {
      message_waiting_ = true;  // written once the upstream call has started
      return false;
    }
    Start(kUpWrite);
    upstream_stream_->Write(down_buf_, tag(kUpWrite));
    return false;
  }

  void OnDownWrite(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ok) {
      Start(kUpRead);
      upstream_stream_->Read(&up_buf_, tag(kUpRead));
      return;
    }
    // kubelet is gone: end the runtime call.
    upstream_ctx_.TryCancel();
    FinishUpstream();
  }

  // Claims the upstream call; false (and kubelet's call finished) if kubelet already gave up.
  bool ClaimUpstream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (cancelled_) {
      FinishDownstream(grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled"), false);
      return false;
    }
    upstream_started_ = true;
    if (sctx_.deadline() != std::chrono::system_clock::time_point::max()) {
      upstream_ctx_.set_deadline(sctx_.deadline());
    }
    for (const auto& [key, value] : ForwardableMetadata(sctx_.client_metadata())) {
      upstream_ctx_.AddMetadata(key, value);
    }
    return true;
  }

  // --- unary relay ---------------------------------------------------------------------------

  // Sends down_buf_ (kubelet's request, byte for byte) to the runtime as one unary call.
  void StartUnaryUpstream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ClaimUpstream()) return;
    upstream_unary_ = deps_.runtime->generic().PrepareUnaryCall(&upstream_ctx_, call_.method,
                                                                down_buf_, engine_->cq());
    upstream_unary_->StartCall();
    Start(kUnary);
    upstream_unary_->Finish(&up_buf_, &upstream_status_, tag(kUnary));
  }

  void OnUnaryDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    CopyMetadata(upstream_ctx_.GetServerInitialMetadata(), /*trailing=*/false);
    CopyMetadata(upstream_ctx_.GetServerTrailingMetadata(), /*trailing=*/true);
    grpc::Status out =
        deps_.observer->End(call_, path(), upstream_status_, Unreachable(upstream_status_));
    Start(kDownFinish);
    if (out.ok()) {
      stream_.WriteAndFinish(up_buf_, grpc::WriteOptions(), out, tag(kDownFinish));
    } else {
      stream_.Finish(out, tag(kDownFinish));
    }
  }

  // --- streaming relay -----------------------------------------------------------------------

  bool StartStreamingUpstream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ClaimUpstream()) return false;
    upstream_stream_ =
        deps_.runtime->generic().PrepareCall(&upstream_ctx_, call_.method, engine_->cq());
    Start(kUpStart);
    upstream_stream_->StartCall(tag(kUpStart));
    return true;
  }

  void OnUpStart(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ok) {  // never started: its status says why
      send_closed_ = true;
      FinishUpstream();
      return;
    }
    upstream_ready_ = true;
    Start(kUpHeaders);
    upstream_stream_->ReadInitialMetadata(tag(kUpHeaders));
    if (close_wanted_) {
      Start(kUpWritesDone);
      upstream_stream_->WritesDone(tag(kUpWritesDone));
    } else if (message_waiting_ && !send_closed_) {
      message_waiting_ = false;
      Start(kUpWrite);
      upstream_stream_->Write(down_buf_, tag(kUpWrite));
    }
  }

  void OnUpHeaders(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Nothing was written to kubelet yet, so its response headers are still open.
    if (ok) CopyMetadata(upstream_ctx_.GetServerInitialMetadata(), /*trailing=*/false);
    Start(kUpRead);
    upstream_stream_->Read(&up_buf_, tag(kUpRead));
  }

  void OnUpRead(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ok) {
      Start(kDownWrite);
      stream_.Write(up_buf_, tag(kDownWrite));
      return;
    }
    // The runtime has sent everything: requests still coming from kubelet have nowhere to go.
    send_closed_ = true;
    FinishUpstream();
  }

  void OnUpWrite(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ok) send_closed_ = true;
    if (send_closed_) return;
    Start(kDownRead);
    stream_.Read(&down_buf_, tag(kDownRead));
  }

  // kubelet has no more to send: half-close towards the runtime (once it has started).
  void CloseUpstreamSend() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (send_closed_) return;
    send_closed_ = true;
    if (!upstream_ready_) {
      close_wanted_ = true;
      return;
    }
    Start(kUpWritesDone);
    upstream_stream_->WritesDone(tag(kUpWritesDone));
  }

  void FinishUpstream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (upstream_finishing_) return;
    upstream_finishing_ = true;
    Start(kUpFinish);
    upstream_stream_->Finish(&upstream_status_, tag(kUpFinish));
  }

  void OnUpFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    CopyMetadata(upstream_ctx_.GetServerTrailingMetadata(), /*trailing=*/true);
    FinishDownstream(upstream_status_, Unreachable(upstream_status_));
  }

  // --- shared --------------------------------------------------------------------------------

  CallPath path() const { return owned_ == nullptr ? CallPath::kForwarded : CallPath::kOwned; }

  // UNAVAILABLE while the channel has no connection: gRPC never reached the runtime.
  bool Unreachable(const grpc::Status& status) const {
    return status.error_code() == grpc::StatusCode::UNAVAILABLE && !deps_.runtime->Connected();
  }

  void CopyMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& from, bool trailing) {
    for (const auto& [key, value] : ForwardableMetadata(from)) {
      if (trailing) {
        sctx_.AddTrailingMetadata(key, value);
      } else {
        sctx_.AddInitialMetadata(key, value);
      }
    }
  }

  void FinishDownstream(const grpc::Status& status, bool unreachable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    grpc::Status out = deps_.observer->End(call_, path(), status, unreachable);
    Start(kDownFinish);
    stream_.Finish(out, tag(kDownFinish));
  }

  // Runs on a handler thread; the kHandler hold keeps the call alive meanwhile.
  void RunOwnedHandler() {
    std::chrono::system_clock::time_point deadline;
    MetadataList metadata;
    {
      absl::MutexLock lock(&mu_);
      deadline = sctx_.deadline();
      metadata = ForwardableMetadata(sctx_.client_metadata());
    }
    CallContext cctx(call_.method, deadline, std::move(metadata), &cancelled_flag_, deps_.runtime);
    OwnedResult result = owned_->Handle(cctx, request_);
    {
      absl::MutexLock lock(&mu_);
      switch (result.kind()) {
        case OwnedResult::Kind::kForward:
          deps_.observer->OwnedDecision(call_, "forward");
          StartUnaryUpstream();  // the request exactly as kubelet sent it (down_buf_)
          break;
        case OwnedResult::Kind::kReply: {
          deps_.observer->OwnedDecision(call_, "reply");
          reply_ = std::move(result.response());
          grpc::Status out = deps_.observer->End(call_, path(), grpc::Status::OK, false);
          Start(kDownFinish);
          stream_.WriteAndFinish(reply_, grpc::WriteOptions(), out, tag(kDownFinish));
          break;
        }
        case OwnedResult::Kind::kFail:
          deps_.observer->OwnedDecision(call_, "fail");
          FinishDownstream(ToGrpc(result.status()), false);
          break;
      }
    }
    OnEvent(kHandler, true);  // drops the hold
  }

  ProxyEngine* const engine_;
  const ProxyDeps& deps_;
  Tag tags_[kNumOps];

  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;

  grpc::GenericServerContext sctx_;
  grpc::GenericServerAsyncReaderWriter stream_{&sctx_};
  grpc::ClientContext upstream_ctx_;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> upstream_unary_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> upstream_stream_;
  grpc::Status upstream_status_;
  ByteBuffer down_buf_;  // kubelet -> runtime, one message at a time
  ByteBuffer up_buf_;    // runtime -> kubelet, one message at a time
  ByteBuffer request_;   // the request an owned handler decodes
  ByteBuffer reply_;     // an owned handler's own answer

  CallObserver::Call call_;
  OwnedMethod* owned_ = nullptr;
  bool unary_ = false;
  bool counted_in_flight_ = false;
  bool got_request_ = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> cancelled_flag_{false};  // cancelled_, for owned handlers
  bool upstream_started_ = false;
  bool upstream_ready_ = false;
  bool upstream_finishing_ = false;
  bool send_closed_ = false;
  bool close_wanted_ = false;
  bool message_waiting_ = false;
};

}  // namespace

ProxyEngine::ProxyEngine(ProxyDeps deps, grpc::ServerBuilder& builder) : deps_(std::move(deps)) {
  builder.RegisterAsyncGenericService(&service_);
  cq_ = builder.AddCompletionQueue();
}

ProxyEngine::~ProxyEngine() { Stop(absl::Seconds(5)); }

void ProxyEngine::Start(int threads) {
  {
    absl::MutexLock lock(&mu_);
    accepting_ = true;
  }
  // A few calls waiting at once, so that a burst from kubelet does not queue behind one.
  for (int i = 0; i < 4; ++i) Accept();
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Poll(); });
}

void ProxyEngine::Accept() {
  {
    absl::MutexLock lock(&mu_);
    ++live_calls_;
  }
  (new ProxyCall(this))->Listen();
}

void ProxyEngine::CallEnded() {
  absl::MutexLock lock(&mu_);
  --live_calls_;
}

bool ProxyEngine::accepting() {
  absl::MutexLock lock(&mu_);
  return accepting_;
}

void ProxyEngine::Poll() {
  void* tag;
  bool ok;
  while (cq_->Next(&tag, &ok)) ProxyCall::Dispatch(tag, ok);
}

void ProxyEngine::Stop(absl::Duration timeout) {
  if (stopped_) return;
  stopped_ = true;
  {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
    auto none = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return live_calls_ == 0; };
    if (!threads_.empty() && !mu_.AwaitWithTimeout(absl::Condition(&none), timeout)) {
      CRYO_LOG(Warning) << live_calls_ << " call(s) did not end at shutdown";
    }
  }
  // Nothing may start an operation after this.
  cq_->Shutdown();
  if (threads_.empty()) {
    void* tag;
    bool ok;
    while (cq_->Next(&tag, &ok)) ProxyCall::Dispatch(tag, ok);
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

}  // namespace cryo::shim
