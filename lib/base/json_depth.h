#pragma once

// The nesting depth of JSON text, counted outside strings, so that a parser that recurses is
// never handed more than it can take. std only: the GPU fast-path library uses it too.

#include <string_view>

namespace cryo::json {

// Whether no object or array in `text` nests deeper than `max_depth`.
inline bool DepthWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace cryo::json
