#include "lib/base/human.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace cryo::human {

std::string SizeCell(uint64_t size, uint64_t referenced) {
  if (referenced == 0) return Bytes(size);
  return absl::StrCat(Bytes(size), " (", Bytes(referenced), " referenced)");
}

std::string Bytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return absl::StrCat(n, " B");
  // Two literal formats: StrFormat checks its format at compile time (clang insists).
  return v < 10 ? absl::StrFormat("%.1f %s", v, kUnits[u])
                : absl::StrFormat("%.0f %s", v, kUnits[u]);
}

std::string Age(absl::Duration d) {
  int64_t s = absl::ToInt64Seconds(d);
  if (s < 0) s = 0;
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 3 * 3600) return absl::StrCat(s / 60, "m");
  if (s < 48 * 3600) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

absl::Time ParseRfc3339(absl::string_view s) {
  absl::Time t;
  std::string err;
  return absl::ParseTime(absl::RFC3339_full, s, &t, &err) ? t : absl::InfinitePast();
}

std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 3, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

absl::Status ParseSize(absl::string_view s, uint64_t* bytes) {
  absl::string_view v = absl::StripAsciiWhitespace(s);
  struct Unit {
    const char* suffix;
    uint64_t mult;
  };
  // Kubernetes' binary suffixes (and the same with "B"), which the ambiguity below points to.
  static const Unit kUnits[] = {{"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},
                                {"TiB", 1ull << 40}, {"PiB", 1ull << 50}, {"EiB", 1ull << 60},
                                {"Ki", 1ull << 10},  {"Mi", 1ull << 20},  {"Gi", 1ull << 30},
                                {"Ti", 1ull << 40},  {"Pi", 1ull << 50},  {"Ei", 1ull << 60}};
  // "4M" is 4 MiB to CRIU (whose --ghost-limit users know) and 4,000,000 bytes to Kubernetes:
  // refused rather than read either way.
  if (!v.empty() && absl::ascii_isdigit(static_cast<unsigned char>(v.front())) &&
      absl::string_view("kKmMgGtT").find(v.back()) != absl::string_view::npos) {
    const absl::string_view num = v.substr(0, v.size() - 1);
    const char unit = absl::ascii_toupper(static_cast<unsigned char>(v.back()));
    const char* zeros = unit == 'K'   ? "000"
                        : unit == 'M' ? "000000"
                        : unit == 'G' ? "000000000"
                                      : "000000000000";
    return absl::InvalidArgumentError(
        absl::StrCat("'", s, "' is ambiguous: CRIU reads it as ", num, " ", std::string(1, unit),
                     "iB, Kubernetes as ", num, zeros, " bytes; write ", num, std::string(1, unit),
                     "i for ", num, " ", std::string(1, unit), "iB, or a plain number of bytes"));
  }
  uint64_t mult = 1;
  for (const Unit& u : kUnits) {
    if (absl::ConsumeSuffix(&v, u.suffix)) {
      mult = u.mult;
      break;
    }
  }
  uint64_t n = 0;
  if (v.empty() || !absl::SimpleAtoi(v, &n) || (n > 0 && mult > UINT64_MAX / n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", s, "' is not a size (a number of bytes, or with Ki, Mi, Gi, Ti, Pi, Ei)"));
  }
  *bytes = n * mult;
  return absl::OkStatus();
}

}  // namespace cryo::human
