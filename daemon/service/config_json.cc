#include "daemon/service/config_json.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace wsync::config_json {
namespace {

// Levenshtein distance, for "did you mean".
size_t Edits(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

absl::Status Wrong(const std::string& path, absl::string_view want, const nlohmann::json& value) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, " must be ", want, ", not ", Describe(value)));
}

}  // namespace

absl::StatusOr<nlohmann::json> Parse(absl::string_view text, const std::string& source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true,
                                 /*ignore_comments=*/true);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the 1-based offset where reading stopped; the line and column are counted from
    // it, and the library's own words are kept only after its "line N, column M: " prefix.
    const size_t at = std::min<size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    const absl::string_view before = text.substr(0, at);
    const size_t line = std::count(before.begin(), before.end(), '\n') + 1;
    const size_t last_newline = before.rfind('\n');
    const size_t column = last_newline == absl::string_view::npos ? at + 1 : at - last_newline;
    absl::string_view what = e.what();
    if (size_t colon = what.find(": "); colon != absl::string_view::npos) {
      what = what.substr(colon + 2);
    }
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", line, ":", column, ": not valid JSON: ", what));
  } catch (const nlohmann::json::exception& e) {
    // The parser's other refusals (a number too large for any JSON number type: out_of_range
    // 406) carry no position; found by the config fuzzer.
    absl::string_view what = e.what();
    if (size_t bracket = what.find("] "); bracket != absl::string_view::npos) {
      what = what.substr(bracket + 2);
    }
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON: ", what));
  }
}

std::string Member(const std::string& path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

std::string Element(const std::string& path, size_t i) { return absl::StrCat(path, "[", i, "]"); }

std::string Describe(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "true or false";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::array:
      return "a list";
    case nlohmann::json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

absl::Status RequireObject(const nlohmann::json& value, const std::string& path) {
  if (value.is_object()) return absl::OkStatus();
  return Wrong(path.empty() ? std::string("the config") : path, "an object", value);
}

absl::Status CheckKeys(const nlohmann::json& object, const std::string& path,
                       const std::vector<std::string>& known) {
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string close;
    size_t best = 3;
    for (const std::string& k : known) {
      const size_t edits = Edits(key, k);
      if (edits < best) {
        best = edits;
        close = k;
      }
    }
    const std::string hint = close.empty()
                                 ? absl::StrCat(" (", path.empty() ? "the config" : path,
                                                " takes: ", absl::StrJoin(known, ", "), ")")
                                 : absl::StrCat("; did you mean \"", close, "\"?");
    return absl::InvalidArgumentError(absl::StrCat(Member(path, key), ": unknown key", hint));
  }
  return absl::OkStatus();
}

absl::StatusOr<const nlohmann::json*> Required(const nlohmann::json& object, const char* key,
                                               const std::string& path) {
  auto it = object.find(key);
  if (it == object.end()) {
    return absl::InvalidArgumentError(absl::StrCat(path.empty() ? std::string("the config") : path,
                                                   ": \"", key, "\" is required"));
  }
  return &*it;
}

absl::StatusOr<std::string> AsString(const nlohmann::json& value, const std::string& path) {
  if (!value.is_string()) return Wrong(path, "a string", value);
  return value.get<std::string>();
}

absl::StatusOr<bool> AsBool(const nlohmann::json& value, const std::string& path) {
  if (!value.is_boolean()) return Wrong(path, "true or false", value);
  return value.get<bool>();
}

absl::StatusOr<double> AsNumber(const nlohmann::json& value, const std::string& path) {
  if (!value.is_number()) return Wrong(path, "a number", value);
  return value.get<double>();
}

absl::StatusOr<int64_t> AsInteger(const nlohmann::json& value, const std::string& path, int64_t min,
                                  int64_t max) {
  const bool too_large =
      value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(max);
  if (!value.is_number_integer() || too_large || value.get<int64_t>() < min ||
      value.get<int64_t>() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " must be an integer from ", min, " to ", max));
  }
  return value.get<int64_t>();
}

absl::StatusOr<std::vector<std::string>> AsStrings(const nlohmann::json& value,
                                                   const std::string& path) {
  if (!value.is_array()) return Wrong(path, "a list of strings", value);
  std::vector<std::string> out;
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) return Wrong(Element(path, i), "a string", value[i]);
    out.push_back(value[i].get<std::string>());
  }
  return out;
}

}  // namespace wsync::config_json
