#include "daemon/engines/http_json.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"
#include "daemon/engines/http_exchange.h"

namespace wsync {
namespace {

// How much of an engine's answer the debug log keeps.
constexpr size_t kLoggedBodyBytes = 300;
// Connecting takes at most this much of a request's time: a host that does not answer the
// handshake is given up on sooner than one that is slow to answer.
constexpr absl::Duration kConnectWithin = absl::Seconds(10);

constexpr uint64_t kMiB = 1 << 20;

std::string Bytes(uint64_t n) {
  if (n % kMiB == 0) return absl::StrCat(n / kMiB, " MiB");
  if (n % 1024 == 0) return absl::StrCat(n / 1024, " KiB");
  return absl::StrCat(n, " bytes");
}

}  // namespace

EngineHttp::EngineHttp(std::string base_url) : target_(ParseHttpTarget(base_url)) {}

uint64_t EngineHttp::AnswerLimit(const std::string& path) {
  const std::string route = path.substr(0, path.find('?'));
  // SGLang's, vLLM's and LMDeploy's documents are a few hundred KiB.
  if (route == "/openapi.json") return 4 * kMiB;
  // One checksum per tensor and TP rank: a large MoE model has tens of thousands of tensors.
  if (route == "/weights_checker" || route == "/weight_checker") return 64 * kMiB;
  return kMiB;
}

absl::StatusOr<HttpReply> EngineHttp::Request(const char* method, const std::string& path,
                                              const std::string* json,
                                              absl::Duration timeout) const {
  const absl::Time started = absl::Now();
  const uint64_t limit = AnswerLimit(path);
  std::string request = absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: ", target_.host_header,
                                     "\r\nAccept: */*\r\nUser-Agent: wsyncd\r\n"
                                     "Connection: close\r\n");
  if (json != nullptr) {
    absl::StrAppend(&request, "Content-Type: application/json\r\nContent-Length: ", json->size(),
                    "\r\n\r\n", *json);
  } else {
    // A POST without a body still says so; a GET says nothing.
    absl::StrAppend(&request, absl::string_view(method) == "POST" ? "Content-Length: 0\r\n" : "",
                    "\r\n");
  }
  absl::StatusOr<HttpReply> reply =
      target_.status.ok() ? ExchangeHttp(target_.host, target_.port, request,
                                         HttpAnswerLimits{limit, kAnswerHeaderLimit},
                                         started + timeout, std::min(timeout, kConnectWithin))
                          : absl::StatusOr<HttpReply>(target_.status);
  if (reply.ok()) return reply;
  const std::string why(reply.status().message());
  if (reply.status().code() == absl::StatusCode::kResourceExhausted) {
    // Something answers there, but not as an engine would: the most any engine's answer to this
    // route holds was read and the rest left unread.
    WSYNC_LOG(Debug, method, " ", target_.base_url, path, ": ", why);
    // The HTTP reader passes on Beast's words for a body over its limit.
    const bool body = absl::StrContains(why, "body limit");
    return absl::FailedPreconditionError(absl::StrCat(
        method, " ", target_.base_url, path, ": the answer's ", body ? "body" : "header",
        " is longer than ", Bytes(body ? limit : kAnswerHeaderLimit), ", the most wsyncd reads ",
        body ? "from this route" : "from any route", ": not an engine's answer"));
  }
  // Refused, timed out, reset, closed without an answer, not HTTP, unresolvable: the caller hears
  // one word for all of them. Telling them apart would tell whoever creates a group which ports
  // of a host are open; the daemon's log keeps the detail for the operator.
  WSYNC_LOG(Debug, method, " ", target_.base_url, path, ": no HTTP answer (", why, " after ",
            absl::FormatDuration(absl::Now() - started), ", timeout ",
            absl::FormatDuration(timeout), " for the whole request)");
  return absl::UnavailableError(
      absl::StrCat(method, " ", target_.base_url, path, ": engine unreachable"));
}

absl::StatusOr<HttpReply> EngineHttp::Post(const std::string& path, const nlohmann::json& body,
                                           absl::Duration timeout) const {
  const std::string json = body.dump();
  return Request("POST", path, &json, timeout);
}

absl::StatusOr<HttpReply> EngineHttp::PostEmpty(const std::string& path,
                                                absl::Duration timeout) const {
  return Request("POST", path, nullptr, timeout);
}

absl::StatusOr<nlohmann::json> EngineHttp::PostEmptyExpectSuccess(const std::string& path,
                                                                  absl::Duration timeout) const {
  auto reply = PostEmpty(path, timeout);
  if (!reply.ok()) return reply.status();
  return ExpectSuccess(path, *reply);
}

absl::StatusOr<HttpReply> EngineHttp::Get(const std::string& path, absl::Duration timeout) const {
  return Request("GET", path, nullptr, timeout);
}

absl::StatusOr<HttpReply> EngineHttp::Options(const std::string& path,
                                              absl::Duration timeout) const {
  return Request("OPTIONS", path, nullptr, timeout);
}

absl::Status EngineHttp::GetHealth(absl::Duration timeout) const {
  WSYNC_ASSIGN_OR_RETURN(HttpReply reply, Get("/health", timeout));
  if (reply.status == 200) return absl::OkStatus();
  // 503 while the engine is unhealthy; its words stay in the debug log.
  LogBody("/health", reply);
  return absl::UnavailableError(absl::StrCat(target_.base_url, "/health answered HTTP ",
                                             reply.status, ": the engine is not healthy"));
}

void EngineHttp::LogBody(const std::string& path, const HttpReply& reply) const {
  WSYNC_LOG(Debug, target_.base_url, path, " answered HTTP ", reply.status, ": ",
            SanitizePeerText(reply.body, kLoggedBodyBytes));
}

std::string EngineHttp::EngineReason(const HttpReply& reply) const {
  if (!identified_.load()) return "";
  const nlohmann::json parsed =
      nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return "";
  // SGLang's and vLLM's {"success": false, "message"}, LMDeploy's and FastAPI's {"detail"}.
  for (const char* key : {"message", "detail"}) {
    auto it = parsed.find(key);
    if (it == parsed.end()) continue;
    const std::string text = it->is_string() ? it->get<std::string>() : it->dump();
    if (!text.empty()) {
      return absl::StrCat("; the engine says: ", SanitizePeerText(text, kMaxEngineReasonBytes));
    }
  }
  return "";
}

absl::Status EngineHttp::CheckReply(const std::string& path, const HttpReply& reply) const {
  if (reply.status >= 200 && reply.status < 300) return absl::OkStatus();
  // The whole answer goes to the daemon's log; the caller hears its reason from an identified
  // engine only (EngineReason).
  LogBody(path, reply);
  const std::string what =
      absl::StrCat(target_.base_url, path, " answered HTTP ", reply.status, ": ");
  const std::string reason = EngineReason(reply);
  if (reply.status >= 500) {
    return absl::InternalError(absl::StrCat(what, "the engine failed the request", reason));
  }
  if (reply.status == 404) {
    return absl::UnimplementedError(
        absl::StrCat(what, "the engine has no such route (too old an engine?)", reason));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(what, "the engine refused the request", reason));
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
    const std::string reason = EngineReason(reply);
    return absl::FailedPreconditionError(
        absl::StrCat(target_.base_url, path, " answered success=false (HTTP ", reply.status,
                     "): the engine refused the request",
                     reason.empty() ? " (its answer is logged at debug level)" : reason));
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
    return absl::InternalError(absl::StrCat(target_.base_url, path, " answered HTTP ",
                                            reply->status,
                                            " without a JSON object: not an engine's answer"));
  }
  return parsed;
}

}  // namespace wsync
