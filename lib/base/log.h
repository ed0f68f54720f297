#pragma once

// Leveled logging to stderr for every cryo binary (this abseil predates absl/log). One line per
// message, "<time> <LEVEL> <program> <file>:<line>] <message>", written with a single write()
// so lines from threads do not interleave. The message is only formatted when its level is on.
//
//   CRYO_LOG(Info) << "restored " << id;
//
// The macro is an expression statement in abseil's form (no dangling else).

#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cryo {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
// "debug", "info", "warn"/"warning", "error" (any case).
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
// The program name in each line (default "cryo").
void SetLogProgram(absl::string_view name);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return os_; }

 private:
  std::ostringstream os_;
};

// Turns the stream expression into void, so the macro below is one conditional expression.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace cryo

#define CRYO_LOG(level)                             \
  switch (0)                                        \
  case 0:                                           \
  default:                                          \
    !::cryo::LogEnabled(::cryo::LogLevel::k##level) \
        ? (void)0                                   \
        : ::cryo::LogVoidify() &                    \
              ::cryo::LogMessage(::cryo::LogLevel::k##level, __FILE__, __LINE__).stream()
