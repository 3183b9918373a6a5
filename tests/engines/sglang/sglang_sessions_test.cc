// SGLang weight-update sessions: how they are found, and that every update sits inside one.

#include "daemon/engines/sglang/sglang_sessions.h"

#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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
// `docs` serves the OpenAPI document (without it, GET /begin_weight_update answers 405). A route
// in `never` is not served at all (GET and POST there: 404).
class SessionServer {
 public:
  SessionServer(bool sessions, bool docs, const std::string& never = "") : without_(never) {
    server_.Get("/get_server_info", [this](const SimHttpRequest&, SimHttpResponse& res) {
      nlohmann::json info = {{"version", "0.5.6"}, {"tp_size", 1}};
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!weight_version_.empty()) info["weight_version"] = weight_version_;
      }
      res.status = 200;
      res.set_content(info.dump(), "application/json");
    });
    server_.Get("/openapi.json", [=, this](const SimHttpRequest&, SimHttpResponse& res) {
      if (!docs) {
        res.status = 404;
        return;
      }
      // As FastAPI lists them: every route the server serves.
      nlohmann::json paths = nlohmann::json::object();
      for (const char* route : {"/pause_generation", "/continue_generation", "/flush_cache",
                                "/init_weights_update_group", "/update_weights_from_distributed"}) {
        paths[route] = {{"post", nlohmann::json::object()}};
      }
      if (!without_.empty()) paths.erase(without_);
      if (!unlisted_.empty()) paths.erase(unlisted_);
      if (without_ != "/update_weight_version") {
        paths["/update_weight_version"] = {{"post", nlohmann::json::object()}};
      }
      if (sessions) {
        paths["/begin_weight_update"] = {{"post", nlohmann::json::object()}};
        paths["/end_weight_update"] = {{"post", nlohmann::json::object()}};
      }
      res.status = 200;
      res.set_content(nlohmann::json{{"openapi", "3.1.0"}, {"paths", paths}}.dump(),
                      "application/json");
    });
    for (const char* path : {"/begin_weight_update", "/end_weight_update", "/pause_generation",
                             "/continue_generation", "/update_weight_version", "/flush_cache"}) {
      // A server without sessions serves neither route (GET there: 404, not 405).
      if (!sessions && absl::EndsWith(path, "_weight_update")) continue;
      if (path == never) continue;
      // As FastAPI: GET or OPTIONS on a served POST route answers 405.
      for (auto on : {&SimHttpServer::Get, &SimHttpServer::Options}) {
        (server_.*on)(path, [this, path](const SimHttpRequest&, SimHttpResponse& res) {
          res.status = path == without_ ? 404 : 405;
        });
      }
      server_.Post(path, [this, path](const SimHttpRequest& req, SimHttpResponse& res) {
        if (path == without_) {
          res.status = 404;
          return;
        }
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
  // What /get_server_info reports as weight_version ("": none).
  void ReportWeightVersion(const std::string& v) {
    std::lock_guard<std::mutex> lock(mu_);
    weight_version_ = v;
  }
  // Serves no `path`: a 404 there, and its OpenAPI document omits it.
  void Without(const char* path) { without_ = path; }
  // Serves `path` but its OpenAPI document omits it (a proxy's own document).
  void Unlisted(const char* path) { unlisted_ = path; }
  const std::string& url() const { return url_; }

 private:
  SimHttpServer server_;
  std::mutex mu_;
  std::vector<std::string> calls_;
  std::string end_fails_;
  std::string without_;
  std::string unlisted_;
  std::string weight_version_;
  std::string url_;
};

// A bucket of one float32 tensor "w" of 2 elements.
BucketManifest OneTensor() {
  BucketManifest manifest;
  manifest.tensors = {TensorEntry{"w", DType::kFloat32, {2}, 0, 8}};
  return manifest;
}

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
    const BucketManifest manifest = OneTensor();
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
    const BucketManifest manifest = OneTensor();
    auto request =
        BroadcastBindingOf(adapter).value()->BucketRequest(manifest, "g", BucketContext{});
    ASSERT_TRUE(request.ok());
    EXPECT_FALSE(nlohmann::json::parse(request->json_body).contains("selector"));
    ASSERT_TRUE(adapter.FinishUpdate(UpdateInfo{"u1", "v1"}).ok());
    for (const std::string& c : server.calls())
      EXPECT_THAT(c, ::testing::Not(HasSubstr("weight_update ")));
  }
}

TEST(SglangSessionsTest, AServerWithoutTheVersionRouteTakesTheVersionOnTheLastBucket) {
  SessionServer server(/*sessions=*/false, /*docs=*/true);
  server.Without("/update_weight_version");
  SglangAdapter adapter = AdapterFor(server);
  ASSERT_TRUE(adapter.Probe().ok());
  const BucketManifest manifest = OneTensor();
  auto* binding = BroadcastBindingOf(adapter).value();
  auto first = binding->BucketRequest(manifest, "g", BucketContext{"u1", "v1", 0, false});
  auto last = binding->BucketRequest(manifest, "g", BucketContext{"u1", "v1", 1, true});
  ASSERT_TRUE(first.ok() && last.ok());
  EXPECT_FALSE(nlohmann::json::parse(first->json_body).contains("weight_version"));
  EXPECT_EQ(nlohmann::json::parse(last->json_body)["weight_version"], "v1");
  ASSERT_TRUE(adapter.FinishUpdate(UpdateInfo{"u1", "v1"}).ok());
  EXPECT_TRUE(adapter.TakeCommitWarnings().empty());
  EXPECT_THAT(server.calls(), ElementsAre("/flush_cache {}", "/continue_generation {}"));
  // A trainer that did not mark its last bucket: the update commits, its label is not set, and
  // the result says so.
  ASSERT_TRUE(binding->BucketRequest(manifest, "g", BucketContext{"u2", "v2", 0, false}).ok());
  ASSERT_TRUE(adapter.FinishUpdate(UpdateInfo{"u2", "v2"}).ok());
  std::vector<std::string> warnings = adapter.TakeCommitWarnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("version 'v2' committed without its label"));
}

TEST(SglangSessionsTest, AServerThatIgnoresTheLabelInItsRequestIsNamedAtTheCommit) {
  // No OpenAPI document, and no /update_weight_version at all: the probe's GET there answers 404.
  SessionServer server(/*sessions=*/false, /*docs=*/false, "/update_weight_version");
  SglangAdapter adapter = AdapterFor(server);
  ASSERT_TRUE(adapter.Probe().ok());
  const BucketManifest manifest = OneTensor();
  auto* binding = BroadcastBindingOf(adapter).value();
  auto last = binding->BucketRequest(manifest, "g", BucketContext{"u1", "v1", 0, true});
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(nlohmann::json::parse(last->json_body)["weight_version"], "v1");
  // The server took it: no warning.
  server.ReportWeightVersion("v1");
  ASSERT_TRUE(adapter.FinishUpdate(UpdateInfo{"u1", "v1"}).ok());
  EXPECT_TRUE(adapter.TakeCommitWarnings().empty());
  // A build that ignores weight_version in requests still reports the previous label.
  ASSERT_TRUE(binding->BucketRequest(manifest, "g", BucketContext{"u2", "v2", 0, true}).ok());
  ASSERT_TRUE(adapter.FinishUpdate(UpdateInfo{"u2", "v2"}).ok());
  std::vector<std::string> warnings = adapter.TakeCommitWarnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("version 'v2' committed (every byte landed), but the server "
                                     "ignored the label in its last bucket's request: "
                                     "/get_server_info reports weight_version 'v1'"));
  for (const std::string& c : server.calls()) {
    EXPECT_THAT(c, ::testing::Not(HasSubstr("/update_weight_version"))) << "never called";
  }
}

// The answer SGLang gives a request that succeeded, with or without the words it appends once it
// recorded the request's weight_version.
HttpReply BucketAnswer(const std::string& version) {
  std::string message = "Succeeded to update parameter online from distributed.";
  if (!version.empty()) absl::StrAppend(&message, " Weight version updated to ", version, ".");
  return HttpReply{200, nlohmann::json{{"success", true}, {"message", message}}.dump(),
                   "application/json"};
}

TEST(SglangSessionsTest, TheLabelAndTheFlushRideOnTheLastBucketAndTheCommitOnlyResumes) {
  SessionServer server(/*sessions=*/false, /*docs=*/true);
  SglangAdapter adapter = AdapterFor(server);
  ASSERT_TRUE(adapter.Probe().ok());
  const BucketManifest manifest = OneTensor();
  auto* binding = BroadcastBindingOf(adapter).value();
  auto first = binding->BucketRequest(manifest, "g", BucketContext{"u1", "v1", 0, false});
  auto last = binding->BucketRequest(manifest, "g", BucketContext{"u1", "v1", 1, true});
  ASSERT_TRUE(first.ok() && last.ok());
  EXPECT_EQ(nlohmann::json::parse(first->json_body)["flush_cache"], false);
  EXPECT_FALSE(nlohmann::json::parse(first->json_body).contains("weight_version"));
  EXPECT_EQ(nlohmann::json::parse(last->json_body)["flush_cache"], true);
  EXPECT_EQ(nlohmann::json::parse(last->json_body)["weight_version"], "v1");
  ASSERT_TRUE(adapter.CheckBucketReply(BucketAnswer("")).ok());
  ASSERT_TRUE(adapter.CheckBucketReply(BucketAnswer("v1")).ok());
  ASSERT_TRUE(adapter.FinishUpdate(UpdateInfo{"u1", "v1"}).ok());
  EXPECT_TRUE(adapter.TakeCommitWarnings().empty());
  EXPECT_THAT(server.calls(), ElementsAre("/continue_generation {}"));

  // An answer that does not say the label was recorded (a build that ignores the field): the
  // commit labels and flushes through the routes, as without a marked last bucket.
  ASSERT_TRUE(binding->BucketRequest(manifest, "g", BucketContext{"u2", "v2", 0, true}).ok());
  ASSERT_TRUE(adapter.CheckBucketReply(BucketAnswer("")).ok());
  ASSERT_TRUE(adapter.FinishUpdate(UpdateInfo{"u2", "v2"}).ok());
  EXPECT_THAT(server.calls(), ElementsAre("/continue_generation {}",
                                          "/update_weight_version "
                                          "{\"abort_all_requests\":false,\"new_version\":\"v2\"}",
                                          "/flush_cache {}", "/continue_generation {}"));
  // What an update carried is its own: a next one whose last bucket was never sent rides
  // nothing.
  ASSERT_TRUE(adapter.FinishUpdate(UpdateInfo{"u3", "v3"}).ok());
  EXPECT_THAT(server.calls().back(), "/continue_generation {}");
  EXPECT_THAT(server.calls()[server.calls().size() - 2], "/flush_cache {}");
}

TEST(SglangSessionsTest, InsideASessionTheFlushWaitsForTheCommit) {
  // The server may finish loading at the session's end: the cache is flushed after it.
  SessionServer server(/*sessions=*/true, /*docs=*/true);
  SglangAdapter adapter = AdapterFor(server);
  ASSERT_TRUE(adapter.Probe().ok());
  ASSERT_TRUE(adapter.BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  const BucketManifest manifest = OneTensor();
  auto last = BroadcastBindingOf(adapter).value()->BucketRequest(
      manifest, "g", BucketContext{"u1", "v1", 0, true});
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(nlohmann::json::parse(last->json_body)["flush_cache"], false);
  EXPECT_EQ(nlohmann::json::parse(last->json_body)["weight_version"], "v1");
  ASSERT_TRUE(adapter.CheckBucketReply(BucketAnswer("v1")).ok());
  ASSERT_TRUE(adapter.FinishUpdate(UpdateInfo{"u1", "v1"}).ok());
  EXPECT_THAT(server.calls(),
              ElementsAre("/begin_weight_update {\"selector\":\"all\"}", "/end_weight_update {}",
                          "/flush_cache {}", "/continue_generation {}"));
  // Nor where the KV cache is resumed at the commit: it is flushed once it is back.
  SglangAdapter resuming(
      EngineEndpoint{server.url(), 1, 1}, AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)},
      SglangOptions(BucketFormat::kFlattened, SglangMemory::kResume), kBroadcastDataPath);
  auto resumed = BroadcastBindingOf(resuming).value()->BucketRequest(
      manifest, "g", BucketContext{"u1", "v1", 0, true});
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(nlohmann::json::parse(resumed->json_body)["flush_cache"], false);
}

TEST(SglangSessionsTest, AVersionRouteThatFailsWarnsAndTheUpdateStillCommits) {
  SessionServer server(/*sessions=*/false, /*docs=*/true);
  server.Fail("/update_weight_version");
  SglangAdapter adapter = AdapterFor(server);
  ASSERT_TRUE(adapter.Probe().ok());
  EXPECT_TRUE(adapter.FinishUpdate(UpdateInfo{"u1", "v1"}).ok());
  std::vector<std::string> warnings = adapter.TakeCommitWarnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("version 'v1' committed (every byte landed), but its label "
                                     "was not set"));
  EXPECT_THAT(warnings[0], HasSubstr("/update_weight_version"));
  EXPECT_TRUE(adapter.TakeCommitWarnings().empty()) << "taken once";
}

TEST(SglangSessionsTest, ARouteEveryUpdateCallsThatTheDocumentLacksIsRefusedBeforeAnyByte) {
  SessionServer server(/*sessions=*/false, /*docs=*/true);
  server.Without("/flush_cache");
  SglangAdapter adapter = AdapterFor(server);
  absl::Status probe = adapter.Probe();
  EXPECT_EQ(probe.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(probe.message(),
              HasSubstr("(SGLang 0.5.6): it serves no POST /flush_cache (its OpenAPI document "
                        "does not list them, and asked with OPTIONS the server does not serve "
                        "them either), which every update of this group calls"));
  EXPECT_TRUE(server.calls().empty()) << "nothing but reads before the refusal";
}

TEST(SglangSessionsTest, ARouteTheDocumentLeavesOutButTheServerServesIsUsed) {
  // A proxy in front publishes a document of its own without /flush_cache, and passes it on.
  SessionServer server(/*sessions=*/false, /*docs=*/true);
  server.Unlisted("/flush_cache");
  SglangAdapter adapter = AdapterFor(server);
  absl::Status probe = adapter.Probe();
  EXPECT_TRUE(probe.ok()) << probe;
  EXPECT_TRUE(server.calls().empty()) << "asked with OPTIONS only";
}

}  // namespace
}  // namespace wsync
