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

void HttpCallControl::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  if (client_ != nullptr) client_->stop();
}

bool HttpCallControl::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

bool HttpCallControl::Attach(httplib::Client* client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) return false;
  client_ = client;
  return true;
}

void HttpCallControl::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  client_ = nullptr;
  ended_ = true;
  cv_.notify_all();
}

void HttpCallControl::MarkWritten() {
  std::lock_guard<std::mutex> lock(mu_);
  written_ = true;
  written_at_ = absl::Now();
  cv_.notify_all();
}

absl::Time HttpCallControl::written_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_at_;
}

bool HttpCallControl::WaitWritten(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!written_ && !ended_ && !cancelled_) {
    if (absl::Now() >= deadline) return false;
    cv_.wait_for(lock, std::chrono::milliseconds(10));
  }
  return written_;
}

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
                                           absl::Duration timeout, HttpCallControl* cancel) const {
  httplib::Client client(base_url_);
  SetTimeouts(client, timeout);
  const absl::Time started = absl::Now();
  const std::string payload = body.dump();
  if (cancel != nullptr && !cancel->Attach(&client)) {
    return absl::CancelledError(absl::StrCat("POST ", base_url_, path, " cancelled"));
  }
  httplib::Result result =
      cancel == nullptr
          ? client.Post(path, payload, "application/json")
          : client.Post(
                path, payload.size(),
                [&payload, cancel](size_t offset, size_t length, httplib::DataSink& sink) {
                  sink.write(payload.data() + offset, length);
                  if (offset + length == payload.size()) cancel->MarkWritten();
                  return true;
                },
                "application/json");
  if (cancel != nullptr) {
    cancel->Detach();
    if (!result && cancel->cancelled()) {
      return absl::CancelledError(absl::StrCat("POST ", base_url_, path, " cancelled"));
    }
  }
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
                                                             absl::Duration timeout,
                                                             HttpCallControl* cancel) const {
  auto reply = Post(path, body, timeout, cancel);
  if (!reply.ok()) return reply.status();
  nlohmann::json parsed = nlohmann::json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("success") && parsed["success"].is_boolean() &&
      !parsed["success"].get<bool>()) {
    std::string message = parsed.value("message", std::string("(no message)"));
    return absl::FailedPreconditionError(absl::StrCat(base_url_, path, " answered success=false",
                                                      " (HTTP ", reply->status, "): ", message));
  }
  if (absl::Status s = CheckReply(path, *reply); !s.ok()) return s;
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
