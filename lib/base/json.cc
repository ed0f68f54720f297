#include "lib/base/json.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace cryo::json {

absl::StatusOr<nlohmann::json> Parse(absl::string_view text, const Limits& limits) {
  if (text.size() > limits.max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON of ", text.size(), " bytes is larger than ", limits.max_bytes));
  }
  if (!DepthWithin(std::string_view(text.data(), text.size()), limits.max_depth)) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON nests deeper than ", limits.max_depth, " levels"));
  }
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  return j;
}

std::string Fields::Where(const char* key) const {
  return where_.empty() ? std::string(key) : absl::StrCat(where_, ".", key);
}

const nlohmann::json* Fields::Find(const char* key) const {
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status Fields::Missing(const char* key) const {
  return absl::InvalidArgumentError(absl::StrCat("field '", Where(key), "' is missing"));
}

absl::Status Fields::Wrong(const char* key, const char* want) const {
  return absl::InvalidArgumentError(absl::StrCat("field '", Where(key), "' is not ", want));
}

absl::Status Fields::Str(const char* key, std::string* out, bool required) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return required ? Missing(key) : absl::OkStatus();
  if (!v->is_string()) return Wrong(key, "a string");
  *out = v->get_ref<const std::string&>();
  return absl::OkStatus();
}

absl::Status Fields::Bool(const char* key, bool* out, bool required) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return required ? Missing(key) : absl::OkStatus();
  if (!v->is_boolean()) return Wrong(key, "true or false");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status Fields::Int64(const char* key, int64_t* out, bool required) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return required ? Missing(key) : absl::OkStatus();
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Wrong(key, "a 64-bit integer");
    }
    *out = static_cast<int64_t>(u);
    return absl::OkStatus();
  }
  if (!v->is_number_integer()) return Wrong(key, "an integer");
  *out = v->get<int64_t>();
  return absl::OkStatus();
}

absl::Status Fields::Int(const char* key, int* out, bool required) const {
  int64_t x = *out;
  if (absl::Status s = Int64(key, &x, required); !s.ok()) return s;
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
    return Wrong(key, "a 32-bit integer");
  }
  *out = static_cast<int>(x);
  return absl::OkStatus();
}

absl::Status Fields::Uint64(const char* key, uint64_t* out, bool required) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return required ? Missing(key) : absl::OkStatus();
  if (!v->is_number_unsigned()) return Wrong(key, "a non-negative integer");
  *out = v->get<uint64_t>();
  return absl::OkStatus();
}

absl::Status Fields::Ints(const char* key, std::vector<int>* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) return Wrong(key, "an array of integers");
  std::vector<int> r;
  r.reserve(v->size());
  for (const auto& e : *v) {
    if (!e.is_number_integer() || e.get<int64_t>() < std::numeric_limits<int>::min() ||
        e.get<int64_t>() > std::numeric_limits<int>::max()) {
      return Wrong(key, "an array of integers");
    }
    r.push_back(e.get<int>());
  }
  *out = std::move(r);
  return absl::OkStatus();
}

absl::Status Fields::Strs(const char* key, std::vector<std::string>* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) return Wrong(key, "an array of strings");
  std::vector<std::string> r;
  for (const auto& e : *v) {
    if (!e.is_string()) return Wrong(key, "an array of strings");
    r.push_back(e.get<std::string>());
  }
  *out = std::move(r);
  return absl::OkStatus();
}

absl::Status Fields::StrMap(const char* key, std::map<std::string, std::string>* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_object()) return Wrong(key, "an object of strings");
  std::map<std::string, std::string> r;
  for (const auto& [k, e] : v->items()) {
    if (!e.is_string()) return Wrong(key, "an object of strings");
    r[k] = e.get<std::string>();
  }
  *out = std::move(r);
  return absl::OkStatus();
}

absl::Status Fields::Uint64Map(const char* key, std::map<std::string, uint64_t>* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_object()) return Wrong(key, "an object of non-negative integers");
  std::map<std::string, uint64_t> r;
  for (const auto& [k, e] : v->items()) {
    if (!e.is_number_unsigned()) return Wrong(key, "an object of non-negative integers");
    r[k] = e.get<uint64_t>();
  }
  *out = std::move(r);
  return absl::OkStatus();
}

absl::Status Fields::Any(const char* key, nlohmann::json* out) const {
  const nlohmann::json* v = Find(key);
  *out = v == nullptr ? nlohmann::json() : *v;
  return absl::OkStatus();
}

absl::StatusOr<const nlohmann::json*> Fields::Object(const char* key, bool required) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) {
    if (required) return Missing(key);
    return static_cast<const nlohmann::json*>(nullptr);
  }
  if (!v->is_object()) return Wrong(key, "an object");
  return v;
}

absl::StatusOr<const nlohmann::json*> Fields::Array(const char* key, bool required) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) {
    if (required) return Missing(key);
    return static_cast<const nlohmann::json*>(nullptr);
  }
  if (!v->is_array()) return Wrong(key, "an array");
  return v;
}

}  // namespace cryo::json
