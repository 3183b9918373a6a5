#ifndef WSYNC_COMMON_LOG_H_
#define WSYNC_COMMON_LOG_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace wsync {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// text: "2026-11-24T18:02:06.123 I message"; json: one object per line for log collectors,
// {"ts", "level", "msg"} and the line's fields.
enum class LogFormat { kText, kJson };

// A field of a structured line: its name and value, a string or a number (kept as its text).
struct LogField {
  LogField(std::string k, std::string v) : key(std::move(k)), value(std::move(v)) {}
  LogField(std::string k, const char* v) : key(std::move(k)), value(v) {}
  LogField(std::string k, double v) : key(std::move(k)), value(absl::StrCat(v)), number(true) {}
  LogField(std::string k, uint64_t v) : key(std::move(k)), value(absl::StrCat(v)), number(true) {}
  std::string key;
  std::string value;
  bool number = false;
};

void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void SetLogFormat(LogFormat format);
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);
// The same line (level and text) again within `window` of its first showing is counted, not
// written; the next showing after the window says how many were held back. Zero: every line.
void SetLogRepeatWindow(absl::Duration window);
// Writes one line to stderr with a timestamp and level, and in the JSON format the fields (text:
// the message alone, which should say what the fields say).
void LogLine(LogLevel level, absl::string_view message, const std::vector<LogField>& fields = {});
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);

}  // namespace wsync

#define WSYNC_LOG(level, ...)                                                   \
  do {                                                                          \
    if (::wsync::LogEnabled(::wsync::LogLevel::k##level))                       \
      ::wsync::LogLine(::wsync::LogLevel::k##level, absl::StrCat(__VA_ARGS__)); \
  } while (0)

#endif  // WSYNC_COMMON_LOG_H_
