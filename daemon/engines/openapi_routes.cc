#include "daemon/engines/openapi_routes.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace wsync {

std::optional<OpenApiRoutes> OpenApiRoutes::FromReply(const HttpReply& reply) {
  if (reply.status != 200) return std::nullopt;
  nlohmann::json doc = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("openapi") || !doc.contains("paths") ||
      !doc["paths"].is_object()) {
    return std::nullopt;
  }
  return OpenApiRoutes(std::move(doc["paths"]));
}

bool OpenApiRoutes::Has(const OpenApiRoute& route) const {
  auto it = paths_.find(route.path);
  return it != paths_.end() && it->is_object() && it->contains(route.method);
}

absl::StatusOr<bool> RouteAsker::Serves(const OpenApiRoute& route) {
  if (!answers_unknown_404_.has_value()) {
    auto calibration = http_.Options(kUnservedProbePath, timeout_);
    if (!calibration.ok()) return calibration.status();
    answers_unknown_404_ = calibration->status == 404;
  }
  if (!*answers_unknown_404_) return false;
  auto reply = http_.Options(route.path, timeout_);
  if (!reply.ok()) return reply.status();
  return reply->status != 404;
}

absl::StatusOr<std::vector<std::string>> UnservedRoutes(const OpenApiRoutes& routes,
                                                        const std::vector<OpenApiRoute>& needed,
                                                        const EngineHttp& http,
                                                        absl::Duration timeout) {
  std::vector<std::string> unserved;
  RouteAsker asker(http, timeout);
  for (const OpenApiRoute& route : needed) {
    auto served = asker.Has(routes, route);
    if (!served.ok()) return served.status();
    if (!*served) {
      unserved.push_back(absl::StrCat(absl::AsciiStrToUpper(route.method), " ", route.path));
    }
  }
  return unserved;
}

absl::StatusOr<std::optional<OpenApiRoutes>> ReadOpenApiRoutes(const EngineHttp& http,
                                                               const std::string& url,
                                                               absl::Duration timeout) {
  auto reply = http.Get("/openapi.json", timeout);
  if (!reply.ok()) return reply.status();
  if (reply->status == 404) return std::nullopt;
  std::optional<OpenApiRoutes> routes = OpenApiRoutes::FromReply(*reply);
  if (!routes.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(url, "/openapi.json answered HTTP ", reply->status,
                     " without an OpenAPI document, so the routes an update calls cannot be "
                     "checked before it"));
  }
  return routes;
}

}  // namespace wsync
