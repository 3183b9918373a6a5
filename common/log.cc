#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <list>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"

namespace wsync {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};
constexpr const char* kLetters[] = {"D", "I", "W", "E"};
constexpr const char* kNames[] = {"debug", "info", "warning", "error"};

// Lines held back as repeats, by a hash of level and text (a line may quote a peer's input and
// be long: it is not kept); the oldest is forgotten past kMaxTracked. The table is made full size
// at the first line, so a burst of distinct errors later allocates nothing.
class Repeats {
 public:
  Repeats() { seen_.reserve(kMaxTracked); }
  // How many like it were held back since it was last written, or -1 to hold this one back.
  int64_t Admit(LogLevel level, absl::string_view text, absl::Time now) {
    std::lock_guard<std::mutex> lock(mu_);
    if (window_ == absl::ZeroDuration()) return 0;
    const uint64_t key = absl::HashOf(static_cast<int>(level), text);
    auto it = seen_.find(key);
    if (it != seen_.end() && now - it->second.shown < window_) {
      ++it->second.held;
      return -1;
    }
    int64_t held = 0;
    if (it != seen_.end()) {
      held = it->second.held;
      it->second = Seen{now, 0, it->second.order};
      return held;
    }
    order_.push_back(key);
    seen_.emplace(key, Seen{now, 0, std::prev(order_.end())});
    if (order_.size() > kMaxTracked) {
      seen_.erase(order_.front());
      order_.pop_front();
    }
    return held;
  }
  void SetWindow(absl::Duration window) {
    std::lock_guard<std::mutex> lock(mu_);
    window_ = window;
  }

 private:
  static constexpr size_t kMaxTracked = 512;
  struct Seen {
    absl::Time shown;
    int64_t held;
    std::list<uint64_t>::iterator order;
  };
  std::mutex mu_;
  absl::Duration window_ = absl::Seconds(10);
  absl::flat_hash_map<uint64_t, Seen> seen_;
  std::list<uint64_t> order_;
};

Repeats& TheRepeats() {
  static auto* repeats = new Repeats();
  return *repeats;
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void SetLogFormat(LogFormat format) { g_format = static_cast<int>(format); }

void SetLogRepeatWindow(absl::Duration window) { TheRepeats().SetWindow(window); }

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat("unknown log format '", name, "' (text, json)"));
}

namespace {

// A text line is one record: a newline or other control byte in a message (a peer's text) would
// forge or garble lines, so each is written as \xNN.
// Unicode's line breaks (NEL, LINE and PARAGRAPH SEPARATOR) split lines for some readers too.
// A message is cut at kMaxLogMessageBytes.
constexpr size_t kMaxLogMessageBytes = 64 << 10;
std::string OneLine(absl::string_view message) {
  const size_t full = message.size();
  if (full > kMaxLogMessageBytes) message = message.substr(0, kMaxLogMessageBytes);
  std::string out;
  out.reserve(message.size());
  for (size_t i = 0; i < message.size(); ++i) {
    const auto c = static_cast<unsigned char>(message[i]);
    const absl::string_view rest = message.substr(i);
    if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else if (absl::StartsWith(rest, "\xc2\x85")) {
      out += "\\u0085";
      ++i;
    } else if (absl::StartsWith(rest, "\xe2\x80\xa8") || absl::StartsWith(rest, "\xe2\x80\xa9")) {
      absl::StrAppendFormat(&out, "\\u%04x", rest[2] == '\xa8' ? 0x2028 : 0x2029);
      i += 2;
    } else {
      out.push_back(message[i]);
    }
  }
  if (full > message.size()) absl::StrAppend(&out, "... (", full, " bytes, cut)");
  return out;
}

}  // namespace

void LogLine(LogLevel level, absl::string_view message, const std::vector<LogField>& fields) {
  const absl::Time now = absl::Now();
  const int64_t held = TheRepeats().Admit(level, message, now);
  if (held < 0) return;
  // Debug traces follow buckets a fraction of a millisecond apart: microseconds then.
  const char* format = g_level.load() == static_cast<int>(LogLevel::kDebug) ? "%Y-%m-%dT%H:%M:%E6S"
                                                                            : "%Y-%m-%dT%H:%M:%E3S";
  const std::string ts = absl::FormatTime(format, now, absl::UTCTimeZone());
  std::string line;
  if (g_format.load() == static_cast<int>(LogFormat::kJson)) {
    nlohmann::ordered_json j = {
        {"ts", ts}, {"level", kNames[static_cast<int>(level)]}, {"msg", std::string(message)}};
    for (const LogField& f : fields) {
      // A number JSON cannot hold (inf, nan) goes as its text.
      nlohmann::ordered_json number = f.number
                                          ? nlohmann::ordered_json::parse(f.value, nullptr, false)
                                          : nlohmann::ordered_json();
      if (f.number && !number.is_discarded()) {
        j[f.key] = std::move(number);
      } else {
        j[f.key] = f.value;
      }
    }
    if (held > 0) j["repeats_held_back"] = held;
    // Invalid UTF-8 (a peer's bytes in a message) is replaced, never a reason to lose the line.
    line = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  } else {
    line = absl::StrCat(ts, " ", kLetters[static_cast<int>(level)], " ", OneLine(message),
                        held > 0 ? absl::StrCat(" (and ", held, " more like it held back)") : "",
                        "\n");
  }
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
