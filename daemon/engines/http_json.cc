#include "daemon/engines/http_json.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"

namespace wsync {
namespace {

void SetTimeouts(httplib::Client& client, absl::Duration timeout) {
  const auto usec = [](absl::Duration d) { return absl::ToInt64Microseconds(d); };
  absl::Duration connect = std::min(timeout, absl::Seconds(10));
  client.set_connection_timeout(0, usec(connect));
  client.set_read_timeout(usec(timeout) / 1000000, usec(timeout) % 1000000);
  client.set_write_timeout(usec(timeout) / 1000000, usec(timeout) % 1000000);
  client.set_keep_alive(false);
}

// How much of an engine's answer the debug log keeps.
constexpr size_t kLoggedBodyBytes = 300;

}  // namespace

EngineHttp::EngineHttp(std::string base_url)
    : base_url_(std::string(absl::StripSuffix(base_url, "/"))) {}

absl::StatusOr<HttpReply> ToReply(const std::string& base, const std::string& method,
                                  const std::string& path, absl::Duration timeout,
                                  absl::Time started, const httplib::Result& result) {
  if (!result) {
    // Refused, timed out, reset, closed without an answer, unresolvable: the caller hears one
    // word for all of them. Telling them apart would tell whoever creates a group which ports of
    // a host are open; the daemon's log keeps the detail for the operator.
    WSYNC_LOG(Debug, method, " ", base, path, ": no HTTP answer (",
              httplib::to_string(result.error()), " after ",
              absl::FormatDuration(absl::Now() - started), ", timeout ",
              absl::FormatDuration(timeout), ")");
    return absl::UnavailableError(absl::StrCat(method, " ", base, path, ": engine unreachable"));
  }
  return HttpReply{result->status, result->body, result->get_header_value("Content-Type")};
}

absl::StatusOr<HttpReply> EngineHttp::Post(const std::string& path, const nlohmann::json& body,
                                           absl::Duration timeout) const {
  httplib::Client client(base_url_);
  SetTimeouts(client, timeout);
  const absl::Time started = absl::Now();
  httplib::Result result = client.Post(path, body.dump(), "application/json");
  return ToReply(base_url_, "POST", path, timeout, started, result);
}

absl::StatusOr<HttpReply> EngineHttp::PostEmpty(const std::string& path,
                                                absl::Duration timeout) const {
  httplib::Client client(base_url_);
  SetTimeouts(client, timeout);
  const absl::Time started = absl::Now();
  httplib::Result result = client.Post(path);
  return ToReply(base_url_, "POST", path, timeout, started, result);
}

absl::StatusOr<nlohmann::json> EngineHttp::PostEmptyExpectSuccess(const std::string& path,
                                                                  absl::Duration timeout) const {
  auto reply = PostEmpty(path, timeout);
  if (!reply.ok()) return reply.status();
  return ExpectSuccess(path, *reply);
}

absl::StatusOr<HttpReply> EngineHttp::Get(const std::string& path, absl::Duration timeout) const {
  httplib::Client client(base_url_);
  SetTimeouts(client, timeout);
  const absl::Time started = absl::Now();
  auto result = client.Get(path);
  return ToReply(base_url_, "GET", path, timeout, started, result);
}

absl::Status EngineHttp::GetHealth(absl::Duration timeout) const {
  WSYNC_ASSIGN_OR_RETURN(HttpReply reply, Get("/health", timeout));
  if (reply.status == 200) return absl::OkStatus();
  // 503 while the engine is unhealthy; its words stay in the debug log.
  LogBody("/health", reply);
  return absl::UnavailableError(absl::StrCat(base_url_, "/health answered HTTP ", reply.status,
                                             ": the engine is not healthy"));
}

void EngineHttp::LogBody(const std::string& path, const HttpReply& reply) const {
  WSYNC_LOG(Debug, base_url_, path, " answered HTTP ", reply.status, ": ",
            SanitizePeerText(reply.body, kLoggedBodyBytes));
}

absl::Status EngineHttp::CheckReply(const std::string& path, const HttpReply& reply) const {
  if (reply.status >= 200 && reply.status < 300) return absl::OkStatus();
  // The engine's words stay in the daemon's log: whatever answers at the URL (the engine, or a
  // service a group was pointed at) never has its response carried back to the caller.
  LogBody(path, reply);
  const std::string what = absl::StrCat(base_url_, path, " answered HTTP ", reply.status, ": ");
  if (reply.status >= 500) return absl::InternalError(what + "the engine failed the request");
  if (reply.status == 404) {
    return absl::UnimplementedError(what + "the engine has no such route (too old an engine?)");
  }
  return absl::FailedPreconditionError(what + "the engine refused the request");
}

absl::StatusOr<nlohmann::json> EngineHttp::PostExpectSuccess(const std::string& path,
                                                             const nlohmann::json& body,
                                                             absl::Duration timeout) const {
  auto reply = Post(path, body, timeout);
  if (!reply.ok()) return reply.status();
  return ExpectSuccess(path, *reply);
}

absl::Status EngineHttp::PostExpectStatus(const std::string& path, const nlohmann::json& body,
                                          absl::Duration timeout) const {
  auto reply = Post(path, body, timeout);
  if (!reply.ok()) return reply.status();
  return CheckReply(path, *reply);
}

absl::StatusOr<nlohmann::json> EngineHttp::ExpectSuccess(const std::string& path,
                                                         const HttpReply& reply) const {
  nlohmann::json parsed = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("success") && parsed["success"].is_boolean() &&
      !parsed["success"].get<bool>()) {
    LogBody(path, reply);
    return absl::FailedPreconditionError(
        absl::StrCat(base_url_, path, " answered success=false (HTTP ", reply.status,
                     "): the engine refused the request (its reply is logged at debug level)"));
  }
  if (absl::Status s = CheckReply(path, reply); !s.ok()) return s;
  return parsed.is_discarded() ? nlohmann::json() : parsed;
}

absl::StatusOr<nlohmann::json> EngineHttp::GetJson(const std::string& path,
                                                   absl::Duration timeout) const {
  auto reply = Get(path, timeout);
  if (!reply.ok()) return reply.status();
  if (absl::Status s = CheckReply(path, *reply); !s.ok()) return s;
  nlohmann::json parsed = nlohmann::json::parse(reply->body, nullptr, false);
  if (!parsed.is_object()) {
    LogBody(path, *reply);
    return absl::InternalError(absl::StrCat(base_url_, path, " answered HTTP ", reply->status,
                                            " without a JSON object: not an engine's answer"));
  }
  return parsed;
}

}  // namespace wsync
