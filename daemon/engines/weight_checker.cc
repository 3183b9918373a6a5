#include "daemon/engines/weight_checker.h"

#include "absl/strings/str_cat.h"
#include "daemon/core/peer_text.h"

namespace wsync {
namespace {

// More tensors than any model has per rank times ranks: an answer past it is not a checker's.
constexpr size_t kMaxChecksums = 1 << 20;

absl::Status NotAChecker(const std::string& url, const char* route, const char* what) {
  return absl::FailedPreconditionError(absl::StrCat("engine ", url, " answered ", route, " ", what,
                                                    ": not a weight checker wsyncd "
                                                    "knows"));
}

// Adds `checksums` (name -> hex string) under `prefix`; false when an entry is not a string.
bool AddChecksums(const nlohmann::json& checksums, const std::string& prefix,
                  WeightChecksums* out) {
  if (!checksums.is_object()) return false;
  for (const auto& [name, value] : checksums.items()) {
    if (!value.is_string() || out->size() >= kMaxChecksums) return false;
    (*out)[prefix + SanitizePeerText(name, kMaxNameBytes * 4)] =
        SanitizePeerText(value.get<std::string>(), kMaxVersionBytes);
  }
  return true;
}

using ChecksumReader = absl::StatusOr<WeightChecksums> (*)(const nlohmann::json& answer,
                                                           const std::string& url);

absl::StatusOr<WeightChecksums> Ask(const EngineHttp& http, const std::string& url,
                                    const char* engine, const char* route, ChecksumReader read,
                                    absl::Duration timeout) {
  auto answer = http.PostExpectSuccess(route, {{"action", "checksum"}}, timeout);
  if (!answer.ok()) {
    if (answer.status().code() == absl::StatusCode::kUnimplemented) {
      return absl::UnimplementedError(
          absl::StrCat("this ", engine, " build has no ", route, " (404)"));
    }
    return answer.status();
  }
  return read(*answer, url);
}

}  // namespace

absl::StatusOr<WeightChecksums> AskSglangWeightChecker(const EngineHttp& http,
                                                       const std::string& url,
                                                       absl::Duration timeout) {
  return Ask(http, url, "SGLang", "/weights_checker", &SglangWeightChecksums, timeout);
}

absl::StatusOr<WeightChecksums> AskVllmWeightChecker(const EngineHttp& http, const std::string& url,
                                                     absl::Duration timeout) {
  return Ask(http, url, "vLLM", "/weight_checker", &VllmWeightChecksums, timeout);
}

absl::StatusOr<WeightChecksums> SglangWeightChecksums(const nlohmann::json& answer,
                                                      const std::string& url) {
  constexpr char kRoute[] = "/weights_checker";
  if (!answer.is_object()) return NotAChecker(url, kRoute, "with no JSON object");
  WeightChecksums out;
  auto ranks = answer.find("ranks");
  if (ranks != answer.end() && ranks->is_array() && !ranks->empty()) {
    for (size_t i = 0; i < ranks->size(); ++i) {
      const nlohmann::json& rank = (*ranks)[i];
      if (!rank.is_object() || !rank.contains("checksums") ||
          !AddChecksums(rank["checksums"], absl::StrCat("tp", i, "/"), &out)) {
        return NotAChecker(url, kRoute, "with a rank whose checksums are not name: string");
      }
    }
    return out;
  }
  auto engine = answer.find("per_engine_checksum");
  if (engine != answer.end() && engine->is_string()) {
    out["engine"] = SanitizePeerText(engine->get<std::string>(), kMaxVersionBytes);
    return out;
  }
  return NotAChecker(url, kRoute, "without ranks or per_engine_checksum");
}

absl::StatusOr<WeightChecksums> VllmWeightChecksums(const nlohmann::json& answer,
                                                    const std::string& url) {
  constexpr char kRoute[] = "/weight_checker";
  if (!answer.is_object() || !answer.contains("checksums")) {
    return NotAChecker(url, kRoute, "without checksums");
  }
  WeightChecksums out;
  if (!AddChecksums(answer["checksums"], "", &out)) {
    return NotAChecker(url, kRoute, "with checksums that are not name: string");
  }
  return out;
}

}  // namespace wsync
