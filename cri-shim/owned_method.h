// CRI calls the shim owns instead of forwarding blindly (CheckpointContainer, StopContainer,
// CreateContainer/StartContainer for restore). An owned handler sees the decoded request and
// decides: forward the original call unchanged, answer it itself, or fail it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cri-shim/metadata.h"
#include "cri-shim/runtime_connection.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"

namespace cryo::shim {

// What one owned handler decided for one call.
class OwnedResult {
 public:
  enum class Kind { kForward, kReply, kFail };

  // Send the original request bytes to the runtime and relay its answer, exactly as for a
  // method the shim does not own.
  static OwnedResult Forward() { return OwnedResult(Kind::kForward, {}, absl::OkStatus()); }
  static OwnedResult Reply(grpc::ByteBuffer response) {
    return OwnedResult(Kind::kReply, std::move(response), absl::OkStatus());
  }
  static OwnedResult Fail(absl::Status status) {
    if (status.ok()) status = absl::InternalError("owned handler failed with an OK status");
    return OwnedResult(Kind::kFail, {}, std::move(status));
  }

  Kind kind() const { return kind_; }
  grpc::ByteBuffer& response() { return response_; }
  const absl::Status& status() const { return status_; }

 private:
  OwnedResult(Kind kind, grpc::ByteBuffer response, absl::Status status)
      : kind_(kind), response_(std::move(response)), status_(std::move(status)) {}

  Kind kind_;
  grpc::ByteBuffer response_;
  absl::Status status_;
};

// Facts about the incoming call and the tools to act for it, handed to owned handlers.
class CallContext {
 public:
  CallContext(std::string method, std::chrono::system_clock::time_point deadline,
              MetadataList metadata, const std::atomic<bool>* cancelled, RuntimeConnection* runtime)
      : method_(std::move(method)),
        deadline_(deadline),
        metadata_(std::move(metadata)),
        cancelled_(cancelled),
        runtime_(runtime) {}

  const std::string& method() const { return method_; }
  // time_point::max() when kubelet set no deadline.
  std::chrono::system_clock::time_point deadline() const { return deadline_; }
  const MetadataList& metadata() const { return metadata_; }
  // True once kubelet gave up on the call (deadline or cancel); the answer is then discarded.
  bool cancelled() const { return cancelled_ != nullptr && cancelled_->load(); }

  // A client context for calling the runtime on behalf of this call: same deadline and
  // application metadata as the incoming call.
  std::unique_ptr<grpc::ClientContext> NewRuntimeContext() const;
  RuntimeConnection& runtime() const { return *runtime_; }

 private:
  std::string method_;
  std::chrono::system_clock::time_point deadline_;
  MetadataList metadata_;
  const std::atomic<bool>* cancelled_;
  RuntimeConnection* runtime_;
};

class OwnedMethod {
 public:
  virtual ~OwnedMethod() = default;
  // Full gRPC method name, e.g. "/runtime.v1.RuntimeService/StopContainer".
  virtual absl::string_view full_name() const = 0;
  // Runs on its own thread and may block (a checkpoint takes seconds). request is the raw
  // request message as kubelet sent it.
  virtual OwnedResult Handle(CallContext& ctx, const grpc::ByteBuffer& request) = 0;
};

// Forward the call unchanged (typed handlers return this to pass).
struct ForwardUnchanged {};

// A unary CRI method with typed request and response: decoding and encoding live here so that
// handlers deal in runtime.v1 messages only.
template <class Req, class Resp>
class UnaryOwnedMethod : public OwnedMethod {
 public:
  using Request = Req;
  using Response = Resp;
  using Result = std::variant<ForwardUnchanged, Resp, absl::Status>;

  explicit UnaryOwnedMethod(std::string full_name) : full_name_(std::move(full_name)) {}

  absl::string_view full_name() const final { return full_name_; }

  OwnedResult Handle(CallContext& ctx, const grpc::ByteBuffer& request) final {
    Req req;
    grpc::ByteBuffer copy(request);  // the reader consumes its buffer
    grpc::ProtoBufferReader reader(&copy);
    if (!req.ParseFromZeroCopyStream(&reader)) {
      // Not ours to judge: the runtime answers malformed requests as it always has.
      return OwnedResult::Forward();
    }
    Result result = HandleRequest(ctx, req);
    if (std::holds_alternative<ForwardUnchanged>(result)) return OwnedResult::Forward();
    if (auto* status = std::get_if<absl::Status>(&result)) return OwnedResult::Fail(*status);
    grpc::ByteBuffer out;
    bool own_buffer = false;
    grpc::Status st =
        grpc::SerializationTraits<Resp>::Serialize(std::get<Resp>(result), &out, &own_buffer);
    if (!st.ok()) {
      return OwnedResult::Fail(
          absl::InternalError(absl::StrCat("encoding the response: ", st.error_message())));
    }
    return OwnedResult::Reply(std::move(out));
  }

 protected:
  virtual Result HandleRequest(CallContext& ctx, const Req& request) = 0;

 private:
  std::string full_name_;
};

// The owned methods of one shim, by full method name.
class OwnedMethods {
 public:
  absl::Status Add(std::unique_ptr<OwnedMethod> method);
  OwnedMethod* Find(absl::string_view full_name) const;
  size_t size() const { return methods_.size(); }

 private:
  absl::flat_hash_map<std::string, std::unique_ptr<OwnedMethod>> methods_;
};

}  // namespace cryo::shim
