#include "daemon/api/checkpoint_json.h"

#include <google/protobuf/util/json_util.h>

namespace cryo::api {

std::string MessageToJson(const google::protobuf::Message& m, bool pretty) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = pretty;
  o.preserve_proto_field_names = true;
  // Every field, zero values too: a reader sees "leave_running": false and "checkpoints": [],
  // not a missing key it must know the default of.
  o.always_print_primitive_fields = true;
  // Only fails for messages with Any fields of unknown types; cryo's messages have none.
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

namespace {

// Manifest fields the HTTP API, which has no authentication, never serves: the job's argv
// (arguments often carry tokens and passwords; the command name stays in "command") and the
// container's annotations (kubelet puts the preStop handler's command there, pod authors
// anything).
constexpr const char* kWithheld[] = {"/target/cmdline", "/container/annotations"};

}  // namespace

nlohmann::json CheckpointToJson(const v1::CheckpointInfo& c) {
  nlohmann::json j = nlohmann::json::parse(MessageToJson(c, false), nullptr, false);
  if (!j.is_object()) j = nlohmann::json::object();
  if (c.manifest_json().empty()) return j;
  j.erase("manifest_json");
  nlohmann::json redacted = nlohmann::json::array();
  nlohmann::json m = nlohmann::json::parse(c.manifest_json(), nullptr, false);
  if (!m.is_object()) {
    // What cannot be parsed cannot be redacted either: withheld whole.
    redacted.push_back("/manifest_json");
  } else {
    for (const char* field : kWithheld) {
      const nlohmann::json::json_pointer p(field);
      if (!m.contains(p)) continue;
      nlohmann::json& parent = m[p.parent_pointer()];
      if (!parent.is_object()) continue;
      parent.erase(p.back());
      redacted.push_back(std::string("/manifest") + field);
    }
    j["manifest"] = std::move(m);
  }
  // Tells a client that a field was withheld, not absent from the checkpoint.
  if (!redacted.empty()) j["redacted"] = std::move(redacted);
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
