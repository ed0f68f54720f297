#pragma once

// Minimal leveled logging to stderr (this abseil predates absl/log). One line per message,
// written with a single write() so lines from threads do not interleave.

#include <sstream>
#include <string>

namespace cryo {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
bool ParseLogLevel(const std::string& name, LogLevel* out);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return os_; }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

}  // namespace cryo

#define CRYO_LOG(level)                                     \
  if (!::cryo::LogEnabled(::cryo::LogLevel::k##level)) {    \
  } else                                                    \
    ::cryo::LogMessage(::cryo::LogLevel::k##level, __FILE__, __LINE__).stream()
