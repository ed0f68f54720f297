#include "cri-shim/metadata.h"

#include "absl/strings/match.h"

namespace cryo::shim {

bool IsForwardableMetadata(absl::string_view key) {
  if (key.empty() || key[0] == ':') return false;
  if (absl::StartsWith(key, "grpc-")) return false;
  return key != "content-type" && key != "te" && key != "user-agent" && key != "host";
}

MetadataList ForwardableMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& from) {
  MetadataList out;
  out.reserve(from.size());
  for (const auto& [key, value] : from) {
    absl::string_view k(key.data(), key.size());
    if (!IsForwardableMetadata(k)) continue;
    out.emplace_back(std::string(k), std::string(value.data(), value.size()));
  }
  return out;
}

}  // namespace cryo::shim
