#include "daemon/engines/sglang/sglang_sessions.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace wsync {
namespace {

constexpr char kOpenApiPath[] = "/openapi.json";
constexpr char kBeginPath[] = "/begin_weight_update";

bool HasPost(const nlohmann::json& paths, const char* path) {
  auto it = paths.find(path);
  return it != paths.end() && it->is_object() && it->contains("post");
}

}  // namespace

absl::StatusOr<bool> SglangSessionsFromOpenApi(const HttpReply& reply, const std::string& url) {
  if (reply.status == 404) {
    return absl::NotFoundError(absl::StrCat(url, kOpenApiPath, " answered HTTP 404"));
  }
  const nlohmann::json doc = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (reply.status != 200 || !doc.is_object() || !doc.contains("paths") ||
      !doc["paths"].is_object()) {
    return absl::FailedPreconditionError(absl::StrCat(
        url, kOpenApiPath, " answered HTTP ", reply.status,
        " without an OpenAPI document, so whether the server has weight-update sessions (which "
        "it would require around every update) cannot be told"));
  }
  const nlohmann::json& paths = doc["paths"];
  return HasPost(paths, kBeginPath) && HasPost(paths, "/end_weight_update");
}

absl::StatusOr<bool> ProbeSglangSessions(const EngineHttp& http, const std::string& url,
                                         absl::Duration timeout) {
  auto doc = http.Get(kOpenApiPath, timeout);
  if (!doc.ok()) return doc.status();
  auto found = SglangSessionsFromOpenApi(*doc, url);
  if (found.ok() || found.status().code() != absl::StatusCode::kNotFound) return found;
  // No documents: ask the route itself, by a method it does not take (no session is opened).
  auto probe = http.Get(kBeginPath, timeout);
  if (!probe.ok()) return probe.status();
  if (probe->status == 405) return true;
  if (probe->status == 404) return false;
  return absl::FailedPreconditionError(
      absl::StrCat(url, " serves no OpenAPI document and answered GET ", kBeginPath, " with HTTP ",
                   probe->status,
                   " (405 or 404 expected), so whether it has weight-update sessions cannot be "
                   "told"));
}

}  // namespace wsync
