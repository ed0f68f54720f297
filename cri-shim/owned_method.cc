#include "cri-shim/owned_method.h"

namespace cryo::shim {

std::unique_ptr<grpc::ClientContext> CallContext::NewRuntimeContext() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (deadline_ != std::chrono::system_clock::time_point::max()) ctx->set_deadline(deadline_);
  for (const auto& [key, value] : metadata_) ctx->AddMetadata(key, value);
  return ctx;
}

absl::Status OwnedMethods::Add(std::unique_ptr<OwnedMethod> method) {
  if (method == nullptr) return absl::InvalidArgumentError("owned method is null");
  std::string name(method->full_name());
  if (name.empty() || name[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("owned method name \"", name, "\" is not a full gRPC method name"));
  }
  auto [it, inserted] = methods_.emplace(name, std::move(method));
  if (!inserted) return absl::AlreadyExistsError(absl::StrCat(name, " is already owned"));
  return absl::OkStatus();
}

OwnedMethod* OwnedMethods::Find(absl::string_view full_name) const {
  auto it = methods_.find(full_name);
  return it == methods_.end() ? nullptr : it->second.get();
}

}  // namespace cryo::shim
