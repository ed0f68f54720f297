#pragma once

// kubectl's -o jsonpath=TEMPLATE for `kubectl cryo`: the subset scripts use, with kubectl's
// meaning. A template is text with {EXPR} blocks; EXPR is a path from the object printed
// (`.items[*].checkpoint_id`, `{.metadata.name}`), a quoted string ({"\n"}, {'\t'}), or
// {range EXPR}...{end}, which repeats what is between for each result of EXPR, the path inside
// then starting from that result. Path steps: .name, ['name'], [N] (negative from the end),
// [*] and .* (every element or value), ..name (every field of that name below). The results of
// one block are printed separated by spaces: strings as they are, other values as compact JSON.
// A path that finds nothing is an error naming it, as kubectl's is.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace cryo::kubectl {

class JsonPath {
 public:
  // The template parsed; INVALID_ARGUMENT saying where it is malformed.
  static absl::StatusOr<JsonPath> Parse(const std::string& text);
  // The template applied to `data`.
  absl::StatusOr<std::string> Execute(const nlohmann::json& data) const;

  struct Node;  // a piece of the template

 private:
  std::shared_ptr<const std::vector<Node>> nodes_;
};

}  // namespace cryo::kubectl
