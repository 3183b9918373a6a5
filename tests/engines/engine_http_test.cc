// EngineHttp against a raw TCP server that answers however a test scripts it: answers longer than
// a route's limit (with a length, chunked, endless, in the header), answers that trickle, and the
// answers an engine really gives.

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net.h"
#include "daemon/engines/http_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

// Serves each connection with `script(fd)` once the request's header has arrived, then closes
// it. Counts the bytes the scripts wrote: what the client took before it hung up.
class ScriptedServer {
 public:
  // Writes to the client; false once it hung up (or the server stops).
  using Write = std::function<bool(const std::string&)>;
  using Script = std::function<void(const Write&)>;

  explicit ScriptedServer(Script script) : script_(std::move(script)) {
    auto fd = ListenTcp("127.0.0.1", 0);
    EXPECT_TRUE(fd.ok());
    listener_ = std::move(*fd);
    port_ = *LocalPort(listener_.get());
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    thread_.join();
  }

  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  uint64_t written() const { return written_.load(); }
  std::string last_request() const {
    std::lock_guard<std::mutex> lock(mu_);
    return request_;
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 20) != 1) continue;
      UniqueFd client(::accept(listener_.get(), nullptr, nullptr));
      if (!client.valid()) continue;
      // The request: its header, and a body as long as it says (small, in these tests).
      std::string request;
      char c;
      while (request.find("\r\n\r\n") == std::string::npos &&
             ReadExact(client.get(), &c, 1, absl::Now() + absl::Seconds(5)).ok()) {
        request += c;
      }
      const size_t length_at = request.find("Content-Length: ");
      if (length_at != std::string::npos) {
        std::string body(std::stoul(request.substr(length_at + 16)), '\0');
        if (ReadExact(client.get(), body.data(), body.size(), absl::Now() + absl::Seconds(5))
                .ok()) {
          request += body;
        }
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        request_ = request;
      }
      script_([&](const std::string& bytes) {
        if (stop_) return false;
        if (!WriteAll(client.get(), bytes.data(), bytes.size(), absl::Now() + absl::Seconds(10))
                 .ok()) {
          return false;
        }
        written_ += bytes.size();
        return true;
      });
    }
  }

  Script script_;
  UniqueFd listener_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> written_{0};
  mutable std::mutex mu_;
  std::string request_;  // the last one; guarded by mu_
  std::thread thread_;
};

const std::string kJsonHead = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";

// A body far over every route's limit: 1 MiB chunks of one JSON string, up to 256 MiB (so that a
// client that reads it all ends, too), or endless while the client takes them.
void Oversized(const ScriptedServer::Write& write, bool endless) {
  if (!write(kJsonHead + "Transfer-Encoding: chunked\r\n\r\n")) return;
  const std::string chunk = "100000\r\n\"" + std::string(kMiB - 1, 'x') + "\r\n";
  for (int i = 0; endless || i < 256; ++i) {
    if (!write(chunk)) return;
  }
  write("0\r\n\r\n");
}

// What the client's socket buffers and the server's may hold past the point where it stopped
// reading: the answer's bytes written beyond its limit.
constexpr uint64_t kInFlight = 32 * kMiB;

TEST(EngineHttpLimits, AnOversizedAnswerIsRefusedNamingTheRouteAndTheLimit) {
  for (const bool endless : {false, true}) {
    ScriptedServer server([&](const ScriptedServer::Write& w) { Oversized(w, endless); });
    const EngineHttp http(server.url());
    struct Call {
      std::string route;
      std::function<absl::Status()> call;
      std::string limit;
      uint64_t limit_bytes;
    };
    const std::vector<Call> calls = {
        {"GET " + server.url() + "/get_server_info",
         [&] { return http.GetJson("/get_server_info", absl::Seconds(20)).status(); }, "1 MiB",
         kMiB},
        {"GET " + server.url() + "/version",
         [&] { return http.GetJson("/version", absl::Seconds(20)).status(); }, "1 MiB", kMiB},
        {"GET " + server.url() + "/openapi.json",
         [&] { return http.Get("/openapi.json", absl::Seconds(20)).status(); }, "4 MiB", 4 * kMiB},
        {"POST " + server.url() + "/init_weights_update_group",
         [&] {
           return http
               .PostExpectSuccess("/init_weights_update_group", {{"world_size", 3}},
                                  absl::Seconds(20))
               .status();
         },
         "1 MiB", kMiB},
        {"POST " + server.url() + "/pause?mode=keep",
         [&] {
           return http.PostEmptyExpectSuccess("/pause?mode=keep", absl::Seconds(20)).status();
         },
         "1 MiB", kMiB},
        {"POST " + server.url() + "/weights_checker",
         [&] {
           return http
               .PostExpectSuccess("/weights_checker", {{"action", "checksum"}}, absl::Seconds(20))
               .status();
         },
         "64 MiB", 64 * kMiB},
    };
    for (const Call& c : calls) {
      const uint64_t before = server.written();
      const absl::Status s = c.call();
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.route << ": " << s;
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr(absl::StrCat(c.route, ": the answer's body is longer than ", c.limit,
                                         ", the most wsyncd reads from this route")))
          << (endless ? "endless" : "256 MiB");
      // The client hung up at the limit instead of reading on.
      absl::SleepFor(absl::Milliseconds(50));
      EXPECT_LT(server.written() - before, c.limit_bytes + kInFlight) << c.route;
    }
  }
}

TEST(EngineHttpLimits, AnAnswerLengthOverTheLimitIsRefusedBeforeItsBodyIsRead) {
  // A Content-Length of 100 TiB: nothing is reserved for it, and nothing read.
  ScriptedServer server([](const ScriptedServer::Write& w) {
    w(kJsonHead + "Content-Length: 109951162777600\r\n\r\n{\"version\": \"");
  });
  const absl::Status s = EngineHttp(server.url()).GetJson("/version", absl::Seconds(5)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("/version: the answer's body is longer than 1 MiB"));
}

TEST(EngineHttpLimits, AnEndlessHeaderIsRefusedAtTheHeaderLimit) {
  for (const bool one_line : {false, true}) {
    // Header fields without end, or one field without end: at most 64 MiB of them.
    ScriptedServer server([&](const ScriptedServer::Write& w) {
      if (!w("HTTP/1.1 200 OK\r\n")) return;
      const std::string piece = one_line ? std::string(64 << 10, 'h')
                                         : std::string("x-pad: ") + std::string(90, 'p') + "\r\n";
      for (uint64_t sent = 0; sent < 64 * kMiB && w(piece); sent += piece.size()) {
      }
    });
    const absl::Status s =
        EngineHttp(server.url()).GetJson("/get_server_info", absl::Seconds(20)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("/get_server_info: the answer's header is longer than 64 KiB"));
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_LT(server.written(), kInFlight);
  }
}

TEST(EngineHttpLimits, AnAnswerAtTheLimitIsReadWhole) {
  const std::string body = "\"" + std::string(kMiB - 2, 'v') + "\"";
  ScriptedServer server([&](const ScriptedServer::Write& w) {
    w(absl::StrCat(kJsonHead, "Content-Length: ", body.size(), "\r\n\r\n", body));
  });
  auto reply = EngineHttp(server.url()).Get("/version", absl::Seconds(20));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->body, body);
  EXPECT_EQ(reply->content_type, "application/json");
}

TEST(EngineHttpDeadline, AnAnswerThatTricklesEndsAtTheRequestsDeadline) {
  // A whole, valid answer, one byte every 100 ms: 6 s to send it all. Each byte arrives well
  // within any per-read timeout; the request's deadline is for all of it.
  const std::string answer = kJsonHead + "Content-Length: 17\r\n\r\n{\"success\": true}";
  for (const bool header_first : {false, true}) {
    ScriptedServer server([&](const ScriptedServer::Write& w) {
      size_t i = 0;
      if (header_first) {
        // The header at once, the body trickling.
        i = answer.find("\r\n\r\n") + 4;
        if (!w(answer.substr(0, i))) return;
      }
      for (; i < answer.size(); ++i) {
        if (!w(answer.substr(i, 1))) return;
        absl::SleepFor(absl::Milliseconds(100));
      }
    });
    const absl::Time t0 = absl::Now();
    const absl::Status s =
        EngineHttp(server.url())
            .PostExpectSuccess("/pause_generation", {{"mode", "retract"}}, absl::Milliseconds(800))
            .status();
    const absl::Duration took = absl::Now() - t0;
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_EQ(s.message(),
              absl::StrCat("POST ", server.url(), "/pause_generation: engine unreachable"));
    // Over at its deadline, not after the whole answer (6 s) or a timeout per byte.
    EXPECT_LT(took, absl::Seconds(4)) << took;
  }
}

TEST(EngineHttp, AnswersAsEnginesGiveThemAreRead) {
  struct Case {
    std::string what, answer;
  };
  const std::vector<Case> cases = {
      {"a length", kJsonHead + "Content-Length: 17\r\n\r\n{\"success\": true}"},
      {"chunked",
       kJsonHead +
           "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"suc\r\nc\r\ncess\": true}\r\n0\r\n\r\n"},
      {"to the close", kJsonHead + "\r\n{\"success\": true}"},
  };
  for (const Case& c : cases) {
    ScriptedServer server([&](const ScriptedServer::Write& w) { w(c.answer); });
    const EngineHttp http(server.url() + "/");
    auto answer =
        http.PostExpectSuccess("/pause_generation", {{"mode", "retract"}}, absl::Seconds(5));
    ASSERT_TRUE(answer.ok()) << c.what << ": " << answer.status();
    EXPECT_EQ((*answer)["success"], true) << c.what;
    // The request as the engine reads it.
    const std::string request = server.last_request();
    EXPECT_THAT(request, HasSubstr("POST /pause_generation HTTP/1.1\r\n"));
    EXPECT_THAT(request,
                HasSubstr(absl::StrCat("\r\nHost: 127.0.0.1:",
                                       server.url().substr(server.url().rfind(':') + 1), "\r\n")));
    EXPECT_THAT(request, HasSubstr("\r\nContent-Type: application/json\r\n"));
    EXPECT_THAT(request, HasSubstr("\r\n\r\n{\"mode\":\"retract\"}"));
  }
  // A POST without a body says its length; a GET says none.
  ScriptedServer server([&](const ScriptedServer::Write& w) { w(cases[0].answer); });
  ASSERT_TRUE(EngineHttp(server.url()).PostEmpty("/resume", absl::Seconds(5)).ok());
  EXPECT_THAT(server.last_request(), HasSubstr("POST /resume HTTP/1.1\r\n"));
  EXPECT_THAT(server.last_request(), HasSubstr("\r\nContent-Length: 0\r\n"));
  ASSERT_TRUE(EngineHttp(server.url()).Get("/health", absl::Seconds(5)).ok());
  EXPECT_THAT(server.last_request(), HasSubstr("GET /health HTTP/1.1\r\n"));
  EXPECT_THAT(server.last_request(), ::testing::Not(HasSubstr("Content-Length")));
}

TEST(EngineHttp, AnAnswerCutShortReadsAsUnreachable) {
  ScriptedServer server([](const ScriptedServer::Write& w) {
    w(kJsonHead + "Content-Length: 100\r\n\r\n{\"success\"");
  });
  const absl::Status s = EngineHttp(server.url()).GetJson("/version", absl::Seconds(5)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(s.message(), absl::StrCat("GET ", server.url(), "/version: engine unreachable"));
}

}  // namespace
}  // namespace wsync
