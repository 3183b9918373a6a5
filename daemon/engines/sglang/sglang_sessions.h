#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_SESSIONS_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_SESSIONS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/http_reply.h"
#include "daemon/engines/http_json.h"

namespace wsync {

// Whether an SGLang server has weight-update sessions (POST /begin_weight_update and
// /end_weight_update, with a "selector"; docs/engines/sglang.md). A server that has them
// asserts, in its scheduler process, that every weight update sits inside begin/end and that no
// second begin comes while one is open: the process dies otherwise. So the answer decides every
// update's calls, and it is read from the server, never assumed.
//
// Read from GET /openapi.json (both routes listed as POST). A server started without its
// documents answers 404 there; then GET /begin_weight_update tells: 405 (the route exists, for
// POST) or 404 (it does not). Anything else is FAILED_PRECONDITION naming the URL.
absl::StatusOr<bool> ProbeSglangSessions(const EngineHttp& http, const std::string& url,
                                         absl::Duration timeout);

// What Probe learns of an SGLang server's routes each time the group forms: its sessions (as
// above), whether it serves /update_weight_version, and which routes the update calls it lacks.
struct SglangRoutes {
  bool sessions = false;
  // Read from the server's OpenAPI document (else asked route by route).
  bool documented = false;
  // POST /update_weight_version: served, not served, or not told (no OpenAPI document and an
  // answer to GET there that is neither 405 nor 404).
  std::optional<bool> version_route;
  // Of the routes asked about, those the OpenAPI document lists no POST for; empty without a
  // document (a GET on each would say only "exists or not", and a 404 there is what a proxy in
  // front may answer for a route it hides: the update then fails naming the route).
  std::vector<std::string> missing;
};

// ProbeSglangSessions and the routes, from one reading of GET /openapi.json; without a document,
// GET on /begin_weight_update and /update_weight_version (405: served, 404: not).
absl::StatusOr<SglangRoutes> ProbeSglangRoutes(const EngineHttp& http, const std::string& url,
                                               const std::vector<std::string>& needed,
                                               absl::Duration timeout);

// The OpenAPI half, for tests: NOT_FOUND when the reply is a 404 (the server serves no documents).
absl::StatusOr<bool> SglangSessionsFromOpenApi(const HttpReply& reply, const std::string& url);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_SESSIONS_H_
