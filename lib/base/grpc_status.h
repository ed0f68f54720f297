#pragma once

// absl::Status <-> grpc::Status: the codes are the same canonical numbers, so the conversion
// keeps code and message.

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace cryo {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace cryo
