#include "lib/contract/checkpoint_every.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cryo::contract {

absl::StatusOr<absl::Duration> ParseCheckpointEvery(absl::string_view v) {
  const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(v));
  if (s == "0" || s == "off" || s == "never") return absl::ZeroDuration();
  absl::Duration d;
  if (s.empty() || !absl::ParseDuration(s, &d) || s == "inf" || s == "-inf" ||
      d < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", v,
                     "' is not a period of at least one second such as \"20m\" or \"1h30m\" "
                     "(or \"off\")"));
  }
  return absl::Trunc(d, absl::Seconds(1));
}

}  // namespace cryo::contract
