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
  // Those of `needed` it lacks, each as "METHOD /path", in order.
  std::vector<std::string> Missing(const std::vector<OpenApiRoute>& needed) const;
  // How many paths the document lists.
  size_t size() const { return paths_.size(); }

 private:
  nlohmann::json paths_;
};

// Whether the server serves `route`, asked with a request that changes nothing: GET on its path.
// FastAPI (Starlette) answers 405 where the path serves only other methods and 404 where it
// serves nothing, so a POST route is served on 405 and a GET route on any answer but 404.
absl::StatusOr<bool> ServesRoute(const EngineHttp& http, const OpenApiRoute& route,
                                 absl::Duration timeout);

// Those of `needed` that the document does not list and the server does not serve when asked
// (ServesRoute), each as "METHOD /path": a document may list only some of what a server serves
// (a gateway or proxy in front that publishes its own), and a route it leaves out is asked
// before it is called missing.
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
