#include "lib/base/ids.h"

#include <arpa/inet.h>

#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cryo {

static bool IdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

absl::Status ValidateCheckpointId(absl::string_view id) {
  if (id.empty()) return absl::InvalidArgumentError("checkpoint id is empty");
  if (id.size() > kMaxIdLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint id is longer than ", kMaxIdLength, " bytes"));
  }
  if (id[0] == '.' || id[0] == '-') {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint id '", absl::CHexEscape(id),
                     "' must not start with '.' or '-' (it names a directory)"));
  }
  for (char c : id) {
    if (!IdChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint id '", absl::CHexEscape(id),
                       "' may only contain letters, digits, '.', '_' and '-'"));
    }
  }
  return absl::OkStatus();
}

std::string SanitizeIdPart(absl::string_view s) {
  std::string out;
  for (char c : s) out.push_back(IdChar(c) ? c : '_');
  while (!out.empty() && (out[0] == '.' || out[0] == '-')) out.erase(0, 1);
  if (out.size() > 64) out.resize(64);
  if (out.empty()) out = "job";
  return out;
}

std::string RandomHex(int bytes) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string out;
  for (int i = 0; i < bytes; ++i) absl::StrAppendFormat(&out, "%02x", rng() & 0xff);
  return out;
}

std::string MakeCheckpointId(absl::string_view workload, absl::Time now) {
  return absl::StrCat(SanitizeIdPart(workload), "-",
                      absl::FormatTime("%Y%m%d-%H%M%S", now, absl::UTCTimeZone()), "-",
                      RandomHex(2));
}

bool IsIpAddress(const std::string& s) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, s.c_str(), buf) == 1 || ::inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

}  // namespace cryo
