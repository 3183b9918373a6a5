#ifndef WSYNC_DAEMON_ENGINES_OPENAPI_ROUTES_H_
#define WSYNC_DAEMON_ENGINES_OPENAPI_ROUTES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/http_reply.h"
#include "daemon/engines/http_json.h"
#include "nlohmann/json.hpp"

namespace wsync {

// A route as an OpenAPI document lists it: a lowercase method and a path ("post",
// "/update_weights").
struct OpenApiRoute {
  std::string method;
  std::string path;
};

// The routes an engine's FastAPI server lists in its OpenAPI document (GET /openapi.json). Every
// adapter reads a server's routes through this one reader.
class OpenApiRoutes {
 public:
  explicit OpenApiRoutes(nlohmann::json paths) : paths_(std::move(paths)) {}
  // The routes of an answer to GET /openapi.json that is one (HTTP 200, a JSON object with
  // "openapi" and a "paths" object); nullopt for any other answer, which each caller words.
  static std::optional<OpenApiRoutes> FromReply(const HttpReply& reply);
  bool Has(const OpenApiRoute& route) const;
  // How many paths the document lists.
  size_t size() const { return paths_.size(); }

 private:
  nlohmann::json paths_;
};

// Asks the server about routes its document leaves out (a gateway or proxy in front may publish a
// document of its own), with a request that runs no route's handler: OPTIONS on the path, which
// FastAPI (Starlette) answers 405 where the path is served for other methods and 404 where
// nothing is. Before its first question it asks a path nothing serves: a server that does not
// answer that 404 (a gateway that answers every path alike) cannot tell served from not, and every
// route it leaves out then counts as absent, as the document says. One asker per probe.
class RouteAsker {
 public:
  RouteAsker(const EngineHttp& http, absl::Duration timeout) : http_(http), timeout_(timeout) {}
  // Whether the server serves `route` (whatever its method: OPTIONS cannot tell methods apart).
  absl::StatusOr<bool> Serves(const OpenApiRoute& route);
  // Whether `routes` lists `route`, or else the server serves it when asked.
  absl::StatusOr<bool> Has(const OpenApiRoutes& routes, const OpenApiRoute& route) {
    if (routes.Has(route)) return true;
    return Serves(route);
  }

 private:
  const EngineHttp& http_;
  absl::Duration timeout_;
  std::optional<bool> answers_unknown_404_;
};

// The path RouteAsker asks first, which no engine serves.
inline constexpr char kUnservedProbePath[] = "/wsync-probe-of-a-route-nothing-serves";

// Those of `needed` that the document does not list and the server does not serve when asked
// (RouteAsker), each as "METHOD /path".
absl::StatusOr<std::vector<std::string>> UnservedRoutes(const OpenApiRoutes& routes,
                                                        const std::vector<OpenApiRoute>& needed,
                                                        const EngineHttp& http,
                                                        absl::Duration timeout);

// The server's document, or nullopt where it serves none (HTTP 404: FastAPI with its docs turned
// off, or a proxy that hides them), where each route answers for itself when it is called.
// FAILED_PRECONDITION where it answers anything else that is not a document: what the server is
// cannot be told. `url` names the engine in errors.
absl::StatusOr<std::optional<OpenApiRoutes>> ReadOpenApiRoutes(const EngineHttp& http,
                                                               const std::string& url,
                                                               absl::Duration timeout);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_OPENAPI_ROUTES_H_
