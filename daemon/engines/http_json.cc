#include "daemon/engines/http_json.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

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

std::string Truncated(const std::string& s) {
  return s.size() <= 300 ? s : absl::StrCat(s.substr(0, 300), "...");
}

}  // namespace

EngineHttp::EngineHttp(std::string base_url)
    : base_url_(std::string(absl::StripSuffix(base_url, "/"))) {}

absl::StatusOr<HttpReply> ToReply(const std::string& base, const std::string& method,
                                  const std::string& path, absl::Duration timeout,
                                  absl::Time started, const httplib::Result& result) {
  if (!result) {
    const auto err = result.error();
    const std::string what = absl::StrCat(method, " ", base, path, ": ");
    const absl::Duration waited = absl::Now() - started;
    if ((err == httplib::Error::Read || err == httplib::Error::Write) && waited < timeout * 0.9) {
      // httplib reports a closed connection and a read timeout alike; the clock tells them apart.
      return absl::UnavailableError(absl::StrCat(
          what, "the engine closed the connection after ", absl::FormatDuration(waited),
          " without answering (engine process died or restarted?)"));
    }
    if (err == httplib::Error::Read || err == httplib::Error::Write) {
      // httplib reports a read timeout as a read error; both mean no complete answer came.
      return absl::DeadlineExceededError(absl::StrCat(what, "no complete answer within ",
                                                      absl::FormatDuration(timeout),
                                                      " (engine hung, or closed the connection)"));
    }
    if (err == httplib::Error::ConnectionTimeout) {
      return absl::DeadlineExceededError(absl::StrCat(what, "connection timed out"));
    }
    return absl::UnavailableError(absl::StrCat(what, httplib::to_string(err)));
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

absl::StatusOr<HttpReply> EngineHttp::Get(const std::string& path, absl::Duration timeout) const {
  httplib::Client client(base_url_);
  SetTimeouts(client, timeout);
  const absl::Time started = absl::Now();
  auto result = client.Get(path);
  return ToReply(base_url_, "GET", path, timeout, started, result);
}

absl::Status EngineHttp::CheckReply(const std::string& path, const HttpReply& reply) const {
  if (reply.status >= 200 && reply.status < 300) return absl::OkStatus();
  std::string msg =
      absl::StrCat(base_url_, path, " answered HTTP ", reply.status, ": ", Truncated(reply.body));
  if (reply.status >= 500) return absl::InternalError(msg);
  if (reply.status == 404) return absl::UnimplementedError(msg);
  return absl::FailedPreconditionError(msg);
}

absl::StatusOr<nlohmann::json> EngineHttp::PostExpectSuccess(const std::string& path,
                                                             const nlohmann::json& body,
                                                             absl::Duration timeout) const {
  auto reply = Post(path, body, timeout);
  if (!reply.ok()) return reply.status();
  return ExpectSuccess(path, *reply);
}

absl::StatusOr<nlohmann::json> EngineHttp::ExpectSuccess(const std::string& path,
                                                         const HttpReply& reply) const {
  nlohmann::json parsed = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("success") && parsed["success"].is_boolean() &&
      !parsed["success"].get<bool>()) {
    std::string message = parsed.value("message", std::string("(no message)"));
    return absl::FailedPreconditionError(absl::StrCat(base_url_, path, " answered success=false",
                                                      " (HTTP ", reply.status, "): ", message));
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
  if (parsed.is_discarded()) {
    return absl::InternalError(
        absl::StrCat(base_url_, path, " did not answer JSON: ", Truncated(reply->body)));
  }
  return parsed;
}

}  // namespace wsync
