#include "lib/base/log.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cryo {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
constexpr const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

bool ParseLogLevel(const std::string& name, LogLevel* out) {
  for (int i = 0; i < 4; ++i) {
    if (strcasecmp(name.c_str(), kNames[i]) == 0 ||
        (i == 2 && strcasecmp(name.c_str(), "warning") == 0)) {
      *out = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  const char* base = std::strrchr(file, '/');
  os_ << absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ ", absl::Now(), absl::UTCTimeZone())
      << kNames[static_cast<int>(level_)] << " " << (base ? base + 1 : file) << ":" << line
      << "] ";
}

LogMessage::~LogMessage() {
  os_ << '\n';
  const std::string s = os_.str();
  ssize_t unused = ::write(STDERR_FILENO, s.data(), s.size());
  (void)unused;
}

}  // namespace cryo
