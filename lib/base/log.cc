#include "lib/base/log.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cryo {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
constexpr const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};

absl::Mutex g_program_mu;
std::string& Program() {
  static std::string* p = new std::string("cryo");
  return *p;
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  std::string n = absl::AsciiStrToLower(name);
  if (n == "debug") return LogLevel::kDebug;
  if (n == "info") return LogLevel::kInfo;
  if (n == "warn" || n == "warning") return LogLevel::kWarning;
  if (n == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level '", name, "' (debug, info, warning, error)"));
}

void SetLogProgram(absl::string_view name) {
  absl::MutexLock l(&g_program_mu);
  Program() = std::string(name);
}

LogMessage::LogMessage(LogLevel level, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  std::string program;
  {
    absl::MutexLock l(&g_program_mu);
    program = Program();
  }
  os_ << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ ", absl::Now(), absl::UTCTimeZone())
      << kNames[static_cast<int>(level)] << " " << program << " " << (base ? base + 1 : file) << ":"
      << line << "] ";
}

LogMessage::~LogMessage() {
  os_ << '\n';
  const std::string s = os_.str();
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(STDERR_FILENO, s.data() + off, s.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

}  // namespace cryo
