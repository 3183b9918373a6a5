#include "common/log.h"

#include <atomic>
#include <cstdio>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace wsync {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
constexpr const char* kNames[] = {"D", "I", "W", "E"};
}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void LogLine(LogLevel level, absl::string_view message) {
  // Debug traces follow buckets a fraction of a millisecond apart: microseconds then.
  const char* format = g_level.load() == static_cast<int>(LogLevel::kDebug) ? "%Y-%m-%dT%H:%M:%E6S"
                                                                            : "%Y-%m-%dT%H:%M:%E3S";
  std::string line = absl::StrCat(absl::FormatTime(format, absl::Now(), absl::UTCTimeZone()), " ",
                                  kNames[static_cast<int>(level)], " ", message, "\n");
  // One fwrite per line keeps lines from different threads whole.
  std::fwrite(line.data(), 1, line.size(), stderr);
}

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level '", name, "' (debug, info, warning, error)"));
}

}  // namespace wsync
