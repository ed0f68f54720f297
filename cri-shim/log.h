// Minimal leveled logging to stderr for the shim (this abseil has no absl/log).
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cryo::shim {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);

// Writes one line "<time> <level> cryo-cri-shim: <message>" atomically.
void LogLine(LogLevel level, absl::string_view message);

}  // namespace cryo::shim

// Arguments are only formatted when the level is enabled.
#define CRYO_SHIM_LOG(level, ...)                                                      \
  do {                                                                                 \
    if (::cryo::shim::LogEnabled(::cryo::shim::LogLevel::level)) {                     \
      ::cryo::shim::LogLine(::cryo::shim::LogLevel::level, absl::StrCat(__VA_ARGS__)); \
    }                                                                                  \
  } while (0)
