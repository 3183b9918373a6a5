#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_SESSIONS_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_SESSIONS_H_

#include <string>

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

// The OpenAPI half, for tests: NOT_FOUND when the reply is a 404 (the server serves no documents).
absl::StatusOr<bool> SglangSessionsFromOpenApi(const HttpReply& reply, const std::string& url);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_SESSIONS_H_
