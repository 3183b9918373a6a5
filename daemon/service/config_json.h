#ifndef WSYNC_DAEMON_SERVICE_CONFIG_JSON_H_
#define WSYNC_DAEMON_SERVICE_CONFIG_JSON_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace wsync::config_json {

// Reading wsyncd's JSON config. Every value is read through its path in the file
// ("groups[0].engines[1].ranks"), so each error says where, in wsyncd's words, never a JSON
// library's ("type must be string, but is number"). All errors are INVALID_ARGUMENT.

// The document, or "<source>:<line>:<column>: <what is wrong>" for text that is not JSON.
absl::StatusOr<nlohmann::json> Parse(absl::string_view text, const std::string& source);

// "<path>.<key>" ("groups[0]" and "name": "groups[0].name"); `key` alone at the top (path "").
std::string Member(const std::string& path, absl::string_view key);
// "<path>[<i>]": "groups[0]".
std::string Element(const std::string& path, size_t i);

// What a value is, for an error: "a number", "a string", "a list", "an object", "true or false",
// "null".
std::string Describe(const nlohmann::json& value);

// "<path> must be an object, not ..." unless `value` is one.
absl::Status RequireObject(const nlohmann::json& value, const std::string& path);
// The first key of `object` not in `known`: "<path>.<key>: unknown key; did you mean \"ranks\"?"
// when a known key is one or two edits away, else the known keys are listed.
absl::Status CheckKeys(const nlohmann::json& object, const std::string& path,
                       const std::vector<std::string>& known);
// `object[key]`, or "<path>: \"<key>\" is required".
absl::StatusOr<const nlohmann::json*> Required(const nlohmann::json& object, const char* key,
                                               const std::string& path);

// A value of one type, or "<path> must be <what>, not <what it is>".
absl::StatusOr<std::string> AsString(const nlohmann::json& value, const std::string& path);
absl::StatusOr<bool> AsBool(const nlohmann::json& value, const std::string& path);
absl::StatusOr<double> AsNumber(const nlohmann::json& value, const std::string& path);
// A JSON number read as an integer in [min, max]: "<path> must be an integer from <min> to
// <max>". nlohmann's get<T>() converts 1e30, 2.5 or -1 as a C++ cast does: undefined for a float
// T cannot hold, a wrap for a negative unsigned.
absl::StatusOr<int64_t> AsInteger(const nlohmann::json& value, const std::string& path, int64_t min,
                                  int64_t max);
absl::StatusOr<std::vector<std::string>> AsStrings(const nlohmann::json& value,
                                                   const std::string& path);

}  // namespace wsync::config_json

#endif  // WSYNC_DAEMON_SERVICE_CONFIG_JSON_H_
