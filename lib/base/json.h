#pragma once

// Parsing JSON that comes from outside (a shared store, a socket, a plugin, a cloud's metadata
// server) so that it can never crash or hang cryo: bounded size and nesting checked before
// nlohmann parses anything, no exceptions, and typed field access whose errors name the field.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/base/json_depth.h"  // DepthWithin
#include "nlohmann/json.hpp"

namespace cryo::json {

struct Limits {
  size_t max_bytes = 16u << 20;
  int max_depth = 32;
};

// INVALID_ARGUMENT for text that is not JSON, too large or nested too deeply.
absl::StatusOr<nlohmann::json> Parse(absl::string_view text, const Limits& limits = {});

// Typed fields of an object. A missing field is left as it is (or refused when `required`);
// a present one of the wrong type is INVALID_ARGUMENT naming `where`.`key`.
class Fields {
 public:
  Fields(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  absl::Status Str(const char* key, std::string* out, bool required = false) const;
  absl::Status Bool(const char* key, bool* out, bool required = false) const;
  absl::Status Int(const char* key, int* out, bool required = false) const;
  absl::Status Int64(const char* key, int64_t* out, bool required = false) const;
  absl::Status Uint64(const char* key, uint64_t* out, bool required = false) const;
  absl::Status Ints(const char* key, std::vector<int>* out) const;
  absl::Status Strs(const char* key, std::vector<std::string>* out) const;
  absl::Status StrMap(const char* key, std::map<std::string, std::string>* out) const;
  absl::Status Uint64Map(const char* key, std::map<std::string, uint64_t>* out) const;
  // Any JSON value (kept as it is, for sections other modules interpret).
  absl::Status Any(const char* key, nlohmann::json* out) const;
  // A nested object, or null when absent or null; INVALID_ARGUMENT when it is something else.
  absl::StatusOr<const nlohmann::json*> Object(const char* key, bool required = false) const;
  absl::StatusOr<const nlohmann::json*> Array(const char* key, bool required = false) const;

  std::string Where(const char* key) const;
  const std::string& where() const { return where_; }  // this object's place ("" at the top)

 private:
  const nlohmann::json* Find(const char* key) const;
  absl::Status Missing(const char* key) const;
  absl::Status Wrong(const char* key, const char* want) const;

  const nlohmann::json& obj_;
  std::string where_;
};

}  // namespace cryo::json
