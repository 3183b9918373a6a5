#include "daemon/engines/sglang/sglang_sessions.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/engines/openapi_routes.h"
#include "nlohmann/json.hpp"

namespace wsync {
namespace {

constexpr char kOpenApiPath[] = "/openapi.json";
constexpr char kBeginPath[] = "/begin_weight_update";
constexpr char kVersionPath[] = "/update_weight_version";

OpenApiRoute Post(const std::string& path) { return OpenApiRoute{"post", path}; }

// The server's routes: NOT_FOUND when it serves no document (404).
absl::StatusOr<OpenApiRoutes> RoutesOf(const HttpReply& reply, const std::string& url) {
  if (reply.status == 404) {
    return absl::NotFoundError(absl::StrCat(url, kOpenApiPath, " answered HTTP 404"));
  }
  std::optional<OpenApiRoutes> routes = OpenApiRoutes::FromReply(reply);
  if (!routes.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        url, kOpenApiPath, " answered HTTP ", reply.status,
        " without an OpenAPI document, so whether the server has weight-update sessions (which "
        "it would require around every update) cannot be told"));
  }
  return *std::move(routes);
}

bool HasSessions(const OpenApiRoutes& routes) {
  return routes.Has(Post(kBeginPath)) && routes.Has(Post("/end_weight_update"));
}

}  // namespace

absl::StatusOr<bool> SglangSessionsFromOpenApi(const HttpReply& reply, const std::string& url) {
  WSYNC_ASSIGN_OR_RETURN(const OpenApiRoutes routes, RoutesOf(reply, url));
  return HasSessions(routes);
}

absl::StatusOr<SglangRoutes> ProbeSglangRoutes(const EngineHttp& http, const std::string& url,
                                               const std::vector<std::string>& needed,
                                               absl::Duration timeout) {
  SglangRoutes routes;
  auto doc = http.Get(kOpenApiPath, timeout);
  if (!doc.ok()) return doc.status();
  auto found = RoutesOf(*doc, url);
  if (found.ok()) {
    // A route the document leaves out may still be served (a proxy in front may publish a
    // document of its own): it is asked before it counts as absent.
    RouteAsker asker(http, timeout);
    const auto has = [&](const std::string& route) { return asker.Has(*found, Post(route)); };
    routes.documented = true;
    WSYNC_ASSIGN_OR_RETURN(const bool begin, has(kBeginPath));
    if (begin) {
      WSYNC_ASSIGN_OR_RETURN(routes.sessions, has("/end_weight_update"));
    }
    WSYNC_ASSIGN_OR_RETURN(routes.version_route, has(kVersionPath));
    for (const std::string& route : needed) {
      WSYNC_ASSIGN_OR_RETURN(const bool served, has(route));
      if (!served) routes.missing.push_back(route);
    }
    return routes;
  }
  if (found.status().code() != absl::StatusCode::kNotFound) return found.status();
  // No documents: ask each route itself, by a method it does not take (nothing is changed).
  auto probe = http.Get(kBeginPath, timeout);
  if (!probe.ok()) return probe.status();
  if (probe->status != 405 && probe->status != 404) {
    return absl::FailedPreconditionError(absl::StrCat(
        url, " serves no OpenAPI document and answered GET ", kBeginPath, " with HTTP ",
        probe->status,
        " (405 or 404 expected), so whether it has weight-update sessions cannot be told"));
  }
  routes.sessions = probe->status == 405;
  auto version = http.Get(kVersionPath, timeout);
  if (!version.ok()) return version.status();
  if (version->status == 405 || version->status == 404) {
    routes.version_route = version->status == 405;
  }
  return routes;
}

absl::StatusOr<bool> ProbeSglangSessions(const EngineHttp& http, const std::string& url,
                                         absl::Duration timeout) {
  WSYNC_ASSIGN_OR_RETURN(SglangRoutes routes, ProbeSglangRoutes(http, url, {}, timeout));
  return routes.sessions;
}

}  // namespace wsync
