// SGLang weight-update sessions: how they are found, and that every update sits inside one.

#include "daemon/engines/sglang/sglang_sessions.h"

#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "daemon/transport/broadcast/broadcast_binding.h"
#include "daemon/transport/ipc/ipc_binding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/sim/sim_http_server.h"

namespace wsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

HttpReply Doc(const nlohmann::json& paths) {
  return HttpReply{200, nlohmann::json{{"openapi", "3.1.0"}, {"paths", paths}}.dump(),
                   "application/json"};
}

TEST(SglangSessionsTest, BothRoutesAsPostMeanSessions) {
  const nlohmann::json post = {{"post", nlohmann::json::object()}};
  EXPECT_TRUE(*SglangSessionsFromOpenApi(
      Doc({{"/begin_weight_update", post}, {"/end_weight_update", post}}), "http://e:1"));
  EXPECT_FALSE(*SglangSessionsFromOpenApi(Doc({{"/begin_weight_update", post}}), "http://e:1"));
  EXPECT_FALSE(
      *SglangSessionsFromOpenApi(Doc({{"/begin_weight_update", {{"get", nlohmann::json::object()}}},
                                      {"/end_weight_update", post}}),
                                 "http://e:1"));
  EXPECT_FALSE(*SglangSessionsFromOpenApi(Doc(nlohmann::json::object()), "http://e:1"));
  EXPECT_EQ(SglangSessionsFromOpenApi(HttpReply{404, "", ""}, "http://e:1").status().code(),
            absl::StatusCode::kNotFound);
  for (const HttpReply& bad : {HttpReply{500, "", ""}, HttpReply{200, "not json", ""},
                               HttpReply{200, "{\"paths\": []}", ""}}) {
    auto s = SglangSessionsFromOpenApi(bad, "http://e:1");
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << bad.body;
    EXPECT_THAT(s.status().message(), HasSubstr("http://e:1/openapi.json"));
  }
}

// A scripted SGLang server that records its calls; `sessions` adds the session routes, and
// `docs` serves the OpenAPI document (without it, GET /begin_weight_update answers 405).
class SessionServer {
 public:
  SessionServer(bool sessions, bool docs) {
    server_.Get("/get_server_info", [](const SimHttpRequest&, SimHttpResponse& res) {
      res.status = 200;
      res.set_content(R"({"version": "0.5.6", "tp_size": 1})", "application/json");
    });
    server_.Get("/openapi.json", [=](const SimHttpRequest&, SimHttpResponse& res) {
      if (!docs) {
        res.status = 404;
        return;
      }
      nlohmann::json paths = {{"/pause_generation", {{"post", nlohmann::json::object()}}}};
      if (sessions) {
        paths["/begin_weight_update"] = {{"post", nlohmann::json::object()}};
        paths["/end_weight_update"] = {{"post", nlohmann::json::object()}};
      }
      res.status = 200;
      res.set_content(nlohmann::json{{"openapi", "3.1.0"}, {"paths", paths}}.dump(),
                      "application/json");
    });
    if (sessions) {
      server_.Get("/begin_weight_update",
                  [](const SimHttpRequest&, SimHttpResponse& res) { res.status = 405; });
    }
    for (const char* path : {"/begin_weight_update", "/end_weight_update", "/pause_generation",
                             "/continue_generation", "/update_weight_version", "/flush_cache"}) {
      server_.Post(path, [this, path](const SimHttpRequest& req, SimHttpResponse& res) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          calls_.push_back(absl::StrCat(path, " ", req.body));
        }
        res.status = std::string(path) == end_fails_ ? 500 : 200;
        res.set_content(R"({"success": true, "message": "ok", "status": "ok"})",
                        "application/json");
      });
    }
    auto port = server_.Start("127.0.0.1", 0);
    url_ = absl::StrCat("http://127.0.0.1:", *port);
  }
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  void Fail(const char* path) { end_fails_ = path; }
  const std::string& url() const { return url_; }

 private:
  SimHttpServer server_;
  std::mutex mu_;
  std::vector<std::string> calls_;
  std::string end_fails_;
  std::string url_;
};

SglangAdapter AdapterFor(const SessionServer& server) {
  return SglangAdapter(EngineEndpoint{server.url(), 1, 1},
                       AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)},
                       SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
}

TEST(SglangSessionsTest, AnUpdateOnASessionBuildIsOpenedAndClosedAroundItsBuckets) {
  for (bool docs : {true, false}) {
    SessionServer server(/*sessions=*/true, docs);
    SglangAdapter adapter = AdapterFor(server);
    ASSERT_TRUE(adapter.Probe().ok());
    EXPECT_TRUE(adapter.sessions()) << "docs " << docs;
    ASSERT_TRUE(adapter.PauseGeneration().ok());
    ASSERT_TRUE(adapter.BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
    BucketManifest manifest;
    manifest.tensors = {TensorEntry{"w", DType::kFloat32, {2}, 0, 8}};
    auto request =
        BroadcastBindingOf(adapter).value()->BucketRequest(manifest, "g", BucketContext{});
    ASSERT_TRUE(request.ok());
    EXPECT_EQ(nlohmann::json::parse(request->json_body)["selector"], "all");
    ASSERT_TRUE(adapter.FinishUpdate(UpdateInfo{"u1", "v1"}).ok());
    EXPECT_THAT(server.calls(),
                ElementsAre("/pause_generation {\"mode\":\"retract\"}",
                            "/begin_weight_update {\"selector\":\"all\"}", "/end_weight_update {}",
                            "/update_weight_version "
                            "{\"abort_all_requests\":false,\"new_version\":\"v1\"}",
                            "/flush_cache {}", "/continue_generation {}"));
  }
}

TEST(SglangSessionsTest, AnAbortedUpdateEndsItsSessionAndAFailedEndIsRetriedBeforeTheNextBegin) {
  SessionServer server(/*sessions=*/true, /*docs=*/true);
  SglangAdapter adapter = AdapterFor(server);
  ASSERT_TRUE(adapter.Probe().ok());
  ASSERT_TRUE(adapter.BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  server.Fail("/end_weight_update");
  // The abort resumes generation even though the session would not end.
  EXPECT_TRUE(adapter.ResumeGeneration().ok());
  server.Fail("");
  ASSERT_TRUE(adapter.BeginUpdate(UpdateInfo{"u2", "v2"}).ok());
  EXPECT_THAT(server.calls(),
              ElementsAre("/begin_weight_update {\"selector\":\"all\"}", "/end_weight_update {}",
                          "/continue_generation {}", "/end_weight_update {}",
                          "/begin_weight_update {\"selector\":\"all\"}"));
  // A commit whose session will not end records no version, and still resumes generation.
  server.Fail("/end_weight_update");
  EXPECT_FALSE(adapter.FinishUpdate(UpdateInfo{"u2", "v2"}).ok());
  const std::vector<std::string> calls = server.calls();
  EXPECT_EQ(calls.back(), "/continue_generation {}");
  for (const std::string& c : calls) EXPECT_THAT(c, ::testing::Not(HasSubstr("v2")));
}

TEST(SglangSessionsTest, AServerWithoutSessionsGetsNoBeginNoEndAndNoSelector) {
  for (bool docs : {true, false}) {
    SessionServer server(/*sessions=*/false, docs);
    SglangAdapter adapter = AdapterFor(server);
    ASSERT_TRUE(adapter.Probe().ok());
    EXPECT_FALSE(adapter.sessions());
    ASSERT_TRUE(adapter.BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
    BucketManifest manifest;
    manifest.tensors = {TensorEntry{"w", DType::kFloat32, {2}, 0, 8}};
    auto request =
        BroadcastBindingOf(adapter).value()->BucketRequest(manifest, "g", BucketContext{});
    ASSERT_TRUE(request.ok());
    EXPECT_FALSE(nlohmann::json::parse(request->json_body).contains("selector"));
    ASSERT_TRUE(adapter.FinishUpdate(UpdateInfo{"u1", "v1"}).ok());
    for (const std::string& c : server.calls())
      EXPECT_THAT(c, ::testing::Not(HasSubstr("weight_update ")));
  }
}

}  // namespace
}  // namespace wsync
