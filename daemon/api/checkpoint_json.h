#pragma once

// JSON of cryod's API objects, shared by the `cryo -o json` CLI and cryod's HTTP API so a
// checkpoint reads the same wherever it is printed: protobuf's canonical JSON mapping with the
// proto field names ("checkpoint_id", 64-bit numbers as strings).

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "cryo/v1/cryo.pb.h"
#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace cryo::api {

// The message as JSON text, indented when `pretty`.
std::string MessageToJson(const google::protobuf::Message& m, bool pretty = true);

// One checkpoint as a JSON object: MessageToJson's fields, except that the manifest (present
// only when the checkpoint was read with its files) is embedded as an object under "manifest"
// instead of the escaped "manifest_json" string, so clients need not parse JSON inside JSON.
// The job's command line and the container's annotations are withheld from it (they may carry
// secrets and the HTTP API has no authentication); "redacted" lists what was withheld.
nlohmann::json CheckpointToJson(const v1::CheckpointInfo& c);

// An array of CheckpointToJson, in the given order.
nlohmann::json CheckpointsToJson(const std::vector<v1::CheckpointInfo>& list);

// {"error": {"code": code, "message": message}}, the shape of every API error.
nlohmann::json ErrorJson(absl::string_view code, absl::string_view message);

}  // namespace cryo::api
