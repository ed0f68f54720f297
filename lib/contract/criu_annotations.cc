#include "lib/contract/criu_annotations.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/base/human.h"
#include "lib/contract/annotations.h"

namespace cryo::contract {

const std::vector<std::string>& CriuAnnotationKeys() {
  static const std::vector<std::string> keys = {"criu-tcp-established", "criu-tcp-close",
                                                "criu-skip-in-flight",  "criu-link-remap",
                                                "criu-ghost-limit",     "criu-ext-unix-sk"};
  return keys;
}

absl::StatusOr<CriuAnnotations> ParseCriuAnnotations(
    const std::map<std::string, std::string>& annotations, const std::string& prefix) {
  CriuAnnotations out;
  auto get = [&](const char* key) -> const std::string* {
    auto it = annotations.find(Key(prefix, key));
    return it == annotations.end() ? nullptr : &it->second;
  };
  auto boolean = [&](const char* key, std::optional<bool>* field) -> absl::Status {
    const std::string* v = get(key);
    if (v == nullptr) return absl::OkStatus();
    const std::string l = absl::AsciiStrToLower(absl::StripAsciiWhitespace(*v));
    if (l == "true") {
      *field = true;
    } else if (l == "false") {
      *field = false;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("annotation ", Key(prefix, key), ": '", *v, "' is not true or false"));
    }
    return absl::OkStatus();
  };
  for (auto [key, field] : {std::pair{"criu-tcp-established", &out.tcp_established},
                            std::pair{"criu-tcp-close", &out.tcp_close},
                            std::pair{"criu-skip-in-flight", &out.skip_in_flight},
                            std::pair{"criu-link-remap", &out.link_remap},
                            std::pair{"criu-ext-unix-sk", &out.ext_unix_sk}}) {
    if (absl::Status s = boolean(key, field); !s.ok()) return s;
  }
  if (const std::string* v = get("criu-ghost-limit")) {
    uint64_t bytes = 0;
    if (absl::Status s = human::ParseSize(*v, &bytes); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("annotation ", Key(prefix, "criu-ghost-limit"), ": ", s.message()));
    }
    if (bytes > kMaxCriuGhostLimit) {
      return absl::InvalidArgumentError(absl::StrCat("annotation ", Key(prefix, "criu-ghost-limit"),
                                                     ": '", *v, "' is above the most allowed (",
                                                     human::Bytes(kMaxCriuGhostLimit), ")"));
    }
    out.ghost_limit = bytes;
  }
  return out;
}

}  // namespace cryo::contract
