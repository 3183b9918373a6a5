#ifndef WSYNC_DAEMON_ENGINES_HTTP_JSON_H_
#define WSYNC_DAEMON_ENGINES_HTTP_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/http_reply.h"
#include "nlohmann/json.hpp"

namespace wsync {

// A small JSON-over-HTTP client for engine admin routes (bucket requests go through an
// UpdateChannel). Each call opens its own connection, so calls to one engine may run concurrently
// (a control request and a health probe, say). Errors name the engine and say what failed:
// connection refused -> UNAVAILABLE, no answer in time -> DEADLINE_EXCEEDED, an HTTP error status
// -> INTERNAL (5xx) or FAILED_PRECONDITION (4xx).
class EngineHttp {
 public:
  // base_url: "http://host:port" (an optional trailing slash is ignored).
  explicit EngineHttp(std::string base_url);

  absl::StatusOr<HttpReply> Post(const std::string& path, const nlohmann::json& body,
                                 absl::Duration timeout) const;
  absl::StatusOr<HttpReply> Get(const std::string& path, absl::Duration timeout) const;

  // POSTs and requires a 2xx reply whose JSON, if it has "success", says true.
  absl::StatusOr<nlohmann::json> PostExpectSuccess(const std::string& path,
                                                   const nlohmann::json& body,
                                                   absl::Duration timeout) const;
  // Requires what PostExpectSuccess requires of a reply to POST `path` (however it was sent).
  absl::StatusOr<nlohmann::json> ExpectSuccess(const std::string& path,
                                               const HttpReply& reply) const;
  absl::StatusOr<nlohmann::json> GetJson(const std::string& path, absl::Duration timeout) const;

  const std::string& base_url() const { return base_url_; }

 private:
  absl::Status CheckReply(const std::string& path, const HttpReply& reply) const;
  std::string base_url_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_HTTP_JSON_H_
