#ifndef WSYNC_DAEMON_ENGINES_HTTP_JSON_H_
#define WSYNC_DAEMON_ENGINES_HTTP_JSON_H_

#include <condition_variable>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace httplib {
class Client;
}

namespace wsync {

struct HttpReply {
  int status = 0;
  std::string body;
  std::string content_type;
};

// Watches one request from another thread: it can end the request in flight (an update request
// whose bucket can no longer arrive, because the collective was aborted, must not hold the update
// until its deadline), and tells when the whole request has been written to the engine.
class HttpCallControl {
 public:
  void Cancel();
  bool cancelled() const;
  // True once the request's last byte went to the socket; false at the deadline, or if the call
  // ended without writing it.
  bool WaitWritten(absl::Time deadline);
  // When the request's last byte went to the socket (InfinitePast until then).
  absl::Time written_at() const;

 private:
  friend class EngineHttp;
  // Returns false when already cancelled.
  bool Attach(httplib::Client* client);
  void Detach();
  void MarkWritten();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool cancelled_ = false;
  bool written_ = false;
  absl::Time written_at_ = absl::InfinitePast();
  bool ended_ = false;
  httplib::Client* client_ = nullptr;
};

// A small JSON-over-HTTP client for engine admin routes. Each call opens its own connection, so
// calls to one engine may run concurrently (an update request and a health probe, say). Errors name
// the engine and say what failed: connection refused -> UNAVAILABLE, no answer in time ->
// DEADLINE_EXCEEDED, an HTTP error status -> INTERNAL (5xx) or FAILED_PRECONDITION (4xx).
class EngineHttp {
 public:
  // base_url: "http://host:port" (an optional trailing slash is ignored).
  explicit EngineHttp(std::string base_url);

  absl::StatusOr<HttpReply> Post(const std::string& path, const nlohmann::json& body,
                                 absl::Duration timeout, HttpCallControl* cancel = nullptr) const;
  absl::StatusOr<HttpReply> Get(const std::string& path, absl::Duration timeout) const;

  // POSTs and requires a 2xx reply whose JSON, if it has "success", says true.
  absl::StatusOr<nlohmann::json> PostExpectSuccess(const std::string& path,
                                                   const nlohmann::json& body,
                                                   absl::Duration timeout,
                                                   HttpCallControl* cancel = nullptr) const;
  absl::StatusOr<nlohmann::json> GetJson(const std::string& path, absl::Duration timeout) const;

  const std::string& base_url() const { return base_url_; }

 private:
  absl::Status CheckReply(const std::string& path, const HttpReply& reply) const;
  std::string base_url_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_HTTP_JSON_H_
