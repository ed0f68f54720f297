// What the shim knows about CRI method names. Names only: forwarding never needs the proto.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace cryo::shim {

struct MethodInfo {
  // A CRI v1 RuntimeService/ImageService method this build knows.
  bool known = false;
  // Known to be unary: the shim relays it as one request and one response (fewer hops than
  // the streaming relay every other method takes).
  bool unary = false;
  // Bounded metrics label: "RuntimeService/Version", or "other" for unknown methods.
  std::string label = "other";
};

MethodInfo ClassifyMethod(absl::string_view full_method);

}  // namespace cryo::shim
