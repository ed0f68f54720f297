#include "api/checkpoint_json.h"

#include <google/protobuf/util/json_util.h>

namespace cryo::api {

std::string MessageToJson(const google::protobuf::Message& m, bool pretty) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = pretty;
  o.preserve_proto_field_names = true;
  // Only fails for messages with Any fields of unknown types; cryo's messages have none.
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

nlohmann::json CheckpointToJson(const v1::CheckpointInfo& c) {
  nlohmann::json j = nlohmann::json::parse(MessageToJson(c, false), nullptr, false);
  if (!j.is_object()) j = nlohmann::json::object();
  if (!c.manifest_json().empty()) {
    nlohmann::json m = nlohmann::json::parse(c.manifest_json(), nullptr, false);
    // A manifest that does not parse stays visible as text rather than vanishing.
    if (!m.is_discarded()) {
      j.erase("manifest_json");
      j["manifest"] = std::move(m);
    }
  }
  return j;
}

nlohmann::json CheckpointsToJson(const std::vector<v1::CheckpointInfo>& list) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& c : list) a.push_back(CheckpointToJson(c));
  return a;
}

nlohmann::json ErrorJson(absl::string_view code, absl::string_view message) {
  return {{"error", {{"code", std::string(code)}, {"message", std::string(message)}}}};
}

}  // namespace cryo::api
