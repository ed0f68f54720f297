// Which gRPC metadata the shim passes through, and copying it across calls.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "grpcpp/support/string_ref.h"

namespace cryo::shim {

using MetadataList = std::vector<std::pair<std::string, std::string>>;

// Application metadata passes; transport headers (pseudo headers, grpc-*, content-type, te,
// user-agent) belong to each hop and are set by gRPC itself.
bool IsForwardableMetadata(absl::string_view key);

MetadataList ForwardableMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& from);

}  // namespace cryo::shim
