#ifndef WSYNC_COMMON_LOG_H_
#define WSYNC_COMMON_LOG_H_

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace wsync {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
// Writes one line to stderr with a timestamp, level and the process name.
void LogLine(LogLevel level, absl::string_view message);
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);

}  // namespace wsync

#define WSYNC_LOG(level, ...)                                                   \
  do {                                                                          \
    if (::wsync::LogEnabled(::wsync::LogLevel::k##level))                       \
      ::wsync::LogLine(::wsync::LogLevel::k##level, absl::StrCat(__VA_ARGS__)); \
  } while (0)

#endif  // WSYNC_COMMON_LOG_H_
