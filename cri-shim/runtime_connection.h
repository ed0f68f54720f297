// The shim's one channel to the real runtime (containerd or CRI-O), shared by the generic
// forwarder and the typed stubs that owned handlers use.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "lib/cri/cri_api.h"

namespace cryo::shim {

class RuntimeConnection {
 public:
  // endpoint: "unix:///path" or "/path". Does not connect: the runtime may come up later.
  static absl::StatusOr<std::unique_ptr<RuntimeConnection>> Create(absl::string_view endpoint);

  grpc::GenericStub& generic() { return *generic_; }
  runtime::v1::RuntimeService::Stub& runtime() { return *runtime_; }
  runtime::v1::ImageService::Stub& images() { return *images_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const std::string& endpoint() const { return endpoint_; }

  // Whether the channel has a live connection now. A call that failed UNAVAILABLE while this is
  // false never reached the runtime.
  bool Connected() const;

 private:
  RuntimeConnection() = default;

  std::string endpoint_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> generic_;
  std::unique_ptr<runtime::v1::RuntimeService::Stub> runtime_;
  std::unique_ptr<runtime::v1::ImageService::Stub> images_;
};

}  // namespace cryo::shim
