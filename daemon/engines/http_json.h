#ifndef WSYNC_DAEMON_ENGINES_HTTP_JSON_H_
#define WSYNC_DAEMON_ENGINES_HTTP_JSON_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/http_reply.h"
#include "daemon/transport/http/http_target.h"
#include "nlohmann/json.hpp"

namespace wsync {

// A small JSON-over-HTTP client for engine admin routes (bucket requests go through an
// UpdateChannel). Each call opens its own connection, so calls to one engine may run concurrently
// (a control request and a health probe, say). Errors name the engine, the route and the HTTP
// status with wsyncd's own reading of it: an HTTP error status -> INTERNAL (5xx), UNIMPLEMENTED
// (404) or FAILED_PRECONDITION (other), success=false -> FAILED_PRECONDITION, and no answer at all
// (refused, timed out, closed) -> UNAVAILABLE "unreachable", whatever the cause. The body and the
// cause go to the debug log.
//
// The engine's own reason for a refusal (its answer's "message", or FastAPI's "detail") is carried
// in the error only once the server has identified itself as an engine (EngineIdentified: its
// adapter's probe read the answers only an engine gives), cut to kMaxEngineReasonBytes and
// escaped. Until then nothing it answers reaches the caller: whatever listens at a URL a group was
// pointed at (a service that is no engine) never has its words carried back.
//
// Every request is bounded: `timeout` is the whole request's (connecting, writing, and reading
// all of the answer), however slowly the engine sends its bytes, and an answer longer than its
// route's limit (AnswerLimit) is refused as FAILED_PRECONDITION naming the route and the limit.
class EngineHttp {
 public:
  // base_url: "http://host:port" (an optional trailing slash is ignored).
  explicit EngineHttp(std::string base_url);

  // The longest answer body wsyncd reads from `path` (a query is ignored): a few MiB for an
  // OpenAPI document, more for a weight checker's checksums (one per tensor and rank), 1 MiB for
  // every other control route, whose answers are a few hundred bytes.
  static uint64_t AnswerLimit(const std::string& path);
  // The longest answer header (status line and fields) wsyncd reads from any route.
  static constexpr uint32_t kAnswerHeaderLimit = 64 << 10;
  // The most of an engine's reason an error carries.
  static constexpr size_t kMaxEngineReasonBytes = 512;

  EngineHttp(const EngineHttp& other)
      : target_(other.target_), identified_(other.identified_.load()) {}

  // The server answered as an engine of its kind does: its reasons may be carried from now on.
  void EngineIdentified() { identified_.store(true); }

  absl::StatusOr<HttpReply> Post(const std::string& path, const nlohmann::json& body,
                                 absl::Duration timeout) const;
  absl::StatusOr<HttpReply> Get(const std::string& path, absl::Duration timeout) const;
  // OPTIONS, with no body: runs no handler of a FastAPI route (Starlette answers 405 where the
  // path is served for other methods, 404 where nothing is).
  absl::StatusOr<HttpReply> Options(const std::string& path, absl::Duration timeout) const;
  // A POST with no body at all (Content-Length: 0), for routes whose official clients send none
  // (vLLM's /start_weight_update, /pause?mode=..., /resume).
  absl::StatusOr<HttpReply> PostEmpty(const std::string& path, absl::Duration timeout) const;
  // POSTs no body and requires a 2xx reply whose JSON, if it has "success", says true.
  absl::StatusOr<nlohmann::json> PostEmptyExpectSuccess(const std::string& path,
                                                        absl::Duration timeout) const;

  // POSTs and requires a 2xx reply whose JSON, if it has "success", says true.
  absl::StatusOr<nlohmann::json> PostExpectSuccess(const std::string& path,
                                                   const nlohmann::json& body,
                                                   absl::Duration timeout) const;
  // POSTs and requires a 2xx reply, whatever its body.
  absl::Status PostExpectStatus(const std::string& path, const nlohmann::json& body,
                                absl::Duration timeout) const;
  // Requires what PostExpectSuccess requires of a reply to POST `path` (however it was sent).
  absl::StatusOr<nlohmann::json> ExpectSuccess(const std::string& path,
                                               const HttpReply& reply) const;
  absl::StatusOr<nlohmann::json> GetJson(const std::string& path, absl::Duration timeout) const;
  // GET /health answered 200 (the engine's own health route); otherwise why not.
  absl::Status GetHealth(absl::Duration timeout) const;
  // The answer's body, cut and with control characters escaped, at debug level.
  void LogBody(const std::string& path, const HttpReply& reply) const;

  const std::string& base_url() const { return target_.base_url; }

 private:
  absl::Status CheckReply(const std::string& path, const HttpReply& reply) const;
  // "; the engine says: <reason>" from an identified engine's JSON answer, else "".
  std::string EngineReason(const HttpReply& reply) const;
  // Sends `method path` (with `body` as JSON when `json`) and reads the whole answer.
  absl::StatusOr<HttpReply> Request(const char* method, const std::string& path,
                                    const std::string* json, absl::Duration timeout) const;
  HttpTarget target_;
  std::atomic<bool> identified_{false};
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_HTTP_JSON_H_
