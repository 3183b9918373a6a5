// VllmAdapter against an in-process HTTP server that records every request: the version gates
// read from GET /version, the init at formation, the calls around an update in order, what it
// does with a sleeping engine, and how 409s and failures end an update.

#include "daemon/engines/vllm/vllm_adapter.h"

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/host/host_platform.h"
#include "daemon/core/weight_group.h"
#include "daemon/engines/openapi_routes.h"
#include "daemon/group_factories.h"
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
using ::testing::Not;

constexpr char kSecret[] = "internal-secret-7f3a";

HttpReply Reply(int status, std::string body) {
  return HttpReply{status, std::move(body), "application/json"};
}

class VllmAdapterTest : public ::testing::Test {
 protected:
  void Start() {
    auto record = [this](const std::string& route) {
      return [this, route](const SimHttpRequest& req, SimHttpResponse& res) {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(req);
        auto scripted = status_.find(route);
        res.status = scripted == status_.end() ? 200 : scripted->second;
        std::string body = R"({"message": "ok"})";
        if (route == "/version") body = nlohmann::json{{"version", version_}}.dump();
        if (route == "/is_sleeping") body = nlohmann::json{{"is_sleeping", sleeping_}}.dump();
        if (route == "/get_world_size") body = nlohmann::json{{"world_size", world_size_}}.dump();
        if (res.status != 200) body = kSecret;
        res.set_content(body, "application/json");
      };
    };
    for (const char* get : {"/version", "/is_sleeping", "/health", "/get_world_size"}) {
      server_.Get(get, record(get));
    }
    // Not recorded: served only where a test sets openapi_ (else 404, as without FastAPI docs).
    server_.Get("/openapi.json", [this](const SimHttpRequest&, SimHttpResponse& res) {
      std::lock_guard<std::mutex> lock(mu_);
      if (openapi_.is_null()) {
        res.status = 404;
        return;
      }
      res.status = 200;
      res.set_content(openapi_.dump(), "application/json");
    });
    for (const char* post :
         {"/init_weight_transfer_engine", "/pause", "/resume", "/wake_up", "/start_weight_update",
          "/update_weights", "/finish_weight_update", "/reset_prefix_cache"}) {
      server_.Post(post, [this, post, served = record(post)](const SimHttpRequest& req,
                                                             SimHttpResponse& res) {
        if (Unserved(post)) {
          res.status = 404;
          return;
        }
        served(req, res);
      });
      // As FastAPI: OPTIONS on a served route answers 405, on a path it does not serve 404.
      server_.Options(post, [this, post](const SimHttpRequest&, SimHttpResponse& res) {
        res.status = Unserved(post) ? 404 : 405;
      });
    }
    auto port = server_.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    url_ = absl::StrCat("http://127.0.0.1:", *port);
  }
  VllmAdapter Adapter(VllmOptions options = VllmOptions()) {
    return VllmAdapter(EngineEndpoint{url_, 1, 1},
                       AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)}, options,
                       kCudaIpcDataPath);
  }
  bool Unserved(const std::string& route) {
    std::lock_guard<std::mutex> lock(mu_);
    return unserved_.count(route) > 0;
  }
  std::vector<std::string> Seen() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> seen;
    for (const SimHttpRequest& r : requests_) {
      seen.push_back(absl::StrCat(r.method, " ", r.path, r.query.empty() ? "" : "?", r.query));
    }
    return seen;
  }
  std::string BodyOf(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const SimHttpRequest& r : requests_) {
      if (r.path == path) return r.body;
    }
    return "<none>";
  }
  void Forget() {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.clear();
  }
  void Script(const std::string& route, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    status_[route] = status;
  }
  static BucketManifest Bucket() {
    BucketManifest m;
    m.tensors = {TensorEntry{"w", DType::kBfloat16, {4}, 0, 8}};
    return m;
  }
  static std::vector<IpcBucketView> Views() {
    return {IpcBucketView{"126c071a-1253-3d49-71ab-17c686b110d5", MemoryKind::kHostShm,
                          "/wsync-1-d0-0-ab", 1 << 20, 0, ""}};
  }

  std::string version_ = "0.29.0";
  nlohmann::json openapi_;  // null: no /openapi.json
  bool sleeping_ = false;
  int world_size_ = 1;
  std::map<std::string, int> status_;
  std::set<std::string> unserved_;  // POST routes the server does not serve (404)
  SimHttpServer server_;
  std::string url_;
  std::mutex mu_;
  std::vector<SimHttpRequest> requests_;
};

TEST_F(VllmAdapterTest, ProbeReadsTheVersionThenInitsTheIpcEngine) {
  Start();
  VllmAdapter a = Adapter();
  ASSERT_TRUE(a.Probe().ok());
  EXPECT_THAT(Seen(), ElementsAre("GET /version", "POST /init_weight_transfer_engine"));
  EXPECT_EQ(nlohmann::json::parse(BodyOf("/init_weight_transfer_engine")),
            nlohmann::json({{"init_info", nlohmann::json::object()}}));
  ASSERT_TRUE(a.variant().has_value());
  EXPECT_TRUE(a.variant()->finish_weight_version);
}

TEST_F(VllmAdapterTest, ARouteEveryUpdateCallsThatTheDocumentLacksIsRefusedBeforeAnyByte) {
  // As FastAPI lists a server started without VLLM_SERVER_DEV_MODE: no weight-transfer routes.
  nlohmann::json paths = nlohmann::json::object();
  for (const char* route : {"/pause", "/resume", "/reset_prefix_cache", "/v1/completions"}) {
    paths[route] = {{"post", nlohmann::json::object()}};
  }
  paths["/is_sleeping"] = {{"get", nlohmann::json::object()}};
  openapi_ = {{"openapi", "3.1.0"}, {"paths", paths}};
  unserved_ = {"/init_weight_transfer_engine", "/update_weights", "/start_weight_update",
               "/finish_weight_update"};
  Start();
  VllmAdapter a = Adapter();
  absl::Status refused = a.Probe();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(),
              HasSubstr("(vLLM 0.29.0): it serves no POST /init_weight_transfer_engine, no POST "
                        "/update_weights, no POST /start_weight_update, no POST "
                        "/finish_weight_update (its OpenAPI document does not list them, and "
                        "asked with OPTIONS the server does not serve them either), which every "
                        "update of this group calls: refused before any byte is sent"));
  EXPECT_THAT(refused.message(), HasSubstr("VLLM_SERVER_DEV_MODE=1"));
  EXPECT_THAT(Seen(), ElementsAre("GET /version")) << "nothing is initialised on it";
  // In dev mode it serves and lists them, and the probe goes on to the init.
  for (const char* route : {"/init_weight_transfer_engine", "/update_weights",
                            "/start_weight_update", "/finish_weight_update"}) {
    std::lock_guard<std::mutex> lock(mu_);
    openapi_["paths"][route] = {{"post", nlohmann::json::object()}};
    unserved_.erase(route);
  }
  Forget();
  ASSERT_TRUE(a.Probe().ok());
  EXPECT_THAT(Seen(), ElementsAre("GET /version", "POST /init_weight_transfer_engine"));
  // Before the session routes (0.22.0) they are not asked for.
  {
    std::lock_guard<std::mutex> lock(mu_);
    openapi_["paths"].erase("/start_weight_update");
    openapi_["paths"].erase("/finish_weight_update");
    version_ = "0.21.0";
  }
  EXPECT_TRUE(a.Probe().ok());
  // Something at /openapi.json that is not a document: what the server is cannot be told.
  {
    std::lock_guard<std::mutex> lock(mu_);
    openapi_ = nlohmann::json::array();
  }
  absl::Status garbled = a.Probe();
  EXPECT_EQ(garbled.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(garbled.message(), HasSubstr("/openapi.json answered HTTP 200 without an OpenAPI "
                                           "document"));
}

TEST_F(VllmAdapterTest, RoutesADocumentLeavesOutAreAskedOfTheServerBeforeTheyCountAsMissing) {
  // A gateway in front publishes a document of its own that lists only the inference routes,
  // and passes every route on: each route an update calls is asked with OPTIONS (405: served),
  // which runs no handler.
  nlohmann::json paths = nlohmann::json::object();
  paths["/v1/completions"] = {{"post", nlohmann::json::object()}};
  openapi_ = {{"openapi", "3.1.0"}, {"paths", paths}};
  Start();
  VllmAdapter a = Adapter();
  absl::Status probed = a.Probe();
  ASSERT_TRUE(probed.ok()) << probed;
  EXPECT_THAT(Seen(), ElementsAre("GET /version", "POST /init_weight_transfer_engine"))
      << "no route's handler ran before the init";
}

TEST_F(VllmAdapterTest, AServerThatAnswersEveryPathAlikeIsTakenAtItsDocumentsWord) {
  // A gateway that answers 405 to an OPTIONS anywhere cannot tell served from not: a route its
  // document leaves out then counts as absent.
  nlohmann::json paths = nlohmann::json::object();
  paths["/v1/completions"] = {{"post", nlohmann::json::object()}};
  openapi_ = {{"openapi", "3.1.0"}, {"paths", paths}};
  server_.Options(kUnservedProbePath,
                  [](const SimHttpRequest&, SimHttpResponse& res) { res.status = 405; });
  Start();
  VllmAdapter a = Adapter();
  absl::Status refused = a.Probe();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("it serves no GET /is_sleeping, no POST /pause"));
  EXPECT_THAT(Seen(), ElementsAre("GET /version"));
}

TEST_F(VllmAdapterTest, ATooOldServerIsRefusedNamingItsVersionAndTheMinimum) {
  version_ = "0.16.0";
  Start();
  VllmAdapter a = Adapter();
  absl::Status s = a.Probe();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("vLLM 0.16.0"));
  EXPECT_THAT(s.message(), HasSubstr(">= 0.17.0"));
  EXPECT_THAT(Seen(), ElementsAre("GET /version")) << "nothing is initialised on it";
  // Packed chunks need a newer server than IPC itself.
  const VllmOptions packed_options(true, VllmPauseMode::kKeep, false, true);
  auto packed = VllmAdapter::CheckVersion({{"version", "0.20.1"}}, "http://e:1", packed_options,
                                          VllmBackend::kIpc);
  EXPECT_EQ(packed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(packed.status().message(), HasSubstr("vLLM 0.20.1 reads no packed IPC updates"));
  EXPECT_TRUE(VllmAdapter::CheckVersion({{"version", "0.20.1"}}, "http://e:1", VllmOptions(),
                                        VllmBackend::kIpc)
                  .ok());
  // A vendor build refused says how it was read, what is needed and how to override; the
  // group's engine_version lets it through, and says so wherever the version shows.
  auto vendor = VllmAdapter::CheckVersion({{"version", "0.17.0-sim"}}, "http://e:1", VllmOptions(),
                                          VllmBackend::kIpc);
  EXPECT_THAT(vendor.status().message(),
              HasSubstr("vLLM 0.17.0-sim, a pre-release of 0.17.0 (vendor suffix '-sim') is read "
                        "as older than 0.17.0"));
  EXPECT_THAT(vendor.status().message(),
              HasSubstr("create the group with --option engine_version=0.17.0"));
  const VllmOptions forced(false, VllmPauseMode::kKeep, false, true, VllmRendezvous::kStore,
                           kVllmDefaultPackedChunkBytes, "0.17.0");
  auto through = VllmAdapter::CheckVersion({{"version", "0.17.0-sim"}}, "http://e:1", forced,
                                           VllmBackend::kIpc);
  ASSERT_TRUE(through.ok()) << through.status();
  EXPECT_EQ(through->first.text, "0.17.0-sim, read as 0.17.0 (the group's engine_version)");
  EXPECT_EQ(through->second.name, "ipc-func-args");
  // A pre-release of a release that changed the payload cannot be served as either side of it
  // without a probe that tells them apart: refused, naming both payloads and the way through.
  auto crossing = VllmAdapter::CheckVersion({{"version", "0.22.0rc2"}}, "http://e:1", VllmOptions(),
                                            VllmBackend::kIpc);
  EXPECT_EQ(crossing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(crossing.status().message(),
              HasSubstr("vLLM 0.22.0rc2, a pre-release of 0.22.0 (rc2) would be served as older "
                        "than 0.22.0, but 0.22.0 changed what wsyncd sends (ipc-func-args before "
                        "it, ipc-args-session from it)"));
  EXPECT_THAT(crossing.status().message(), HasSubstr("--option engine_version=0.22.0"));
  auto nccl_crossing = VllmAdapter::CheckVersion({{"version", "0.28.0.dev5+gabc"}}, "http://e:1",
                                                 VllmOptions(), VllmBackend::kNccl);
  EXPECT_THAT(nccl_crossing.status().message(), HasSubstr("0.28.0 changed what wsyncd sends"));
  // One whose release changed nothing is served as that release would be.
  auto quiet = VllmAdapter::CheckVersion({{"version", "0.22.1rc1"}}, "http://e:1", VllmOptions(),
                                         VllmBackend::kIpc);
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_EQ(quiet->second.name, "ipc-args-session");
  auto other = VllmAdapter::CheckVersion({{"detail", kSecret}}, "http://e:1", VllmOptions(),
                                         VllmBackend::kIpc);
  EXPECT_THAT(other.status().message(), HasSubstr("not a vLLM server"));
  auto garbled = VllmAdapter::CheckVersion({{"version", kSecret}}, "http://e:1", VllmOptions(),
                                           VllmBackend::kIpc);
  EXPECT_EQ(garbled.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(garbled.status().message(), Not(HasSubstr(kSecret)));
}

TEST_F(VllmAdapterTest, AServerWithoutTheDevRoutesIsNamedWithTheFlagsItNeeds) {
  Script("/init_weight_transfer_engine", 404);
  Start();
  absl::Status s = Adapter().Probe();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("VLLM_SERVER_DEV_MODE=1"));
  EXPECT_THAT(s.message(), Not(HasSubstr(kSecret)));
}

TEST_F(VllmAdapterTest, AnUpdateIsPauseStartBucketsFinishWithVersionResetResume) {
  Start();
  VllmAdapter a = Adapter();
  ASSERT_TRUE(a.Probe().ok());
  Forget();
  const UpdateInfo update{"u-1", "v7"};
  ASSERT_TRUE(a.PauseGeneration().ok());
  ASSERT_TRUE(a.BeginUpdate(update).ok());
  auto request = IpcBindingOf(a).value()->BucketRequest(Bucket(), Views(),
                                                        BucketContext{"u-1", "v7", 0, true});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->path, "/update_weights");
  ASSERT_TRUE(a.CheckBucketReply(Reply(200, R"({"message": "Weights updated"})")).ok());
  ASSERT_TRUE(a.FinishUpdate(update).ok());
  EXPECT_THAT(Seen(), ElementsAre("GET /is_sleeping", "POST /pause?mode=keep",
                                  "POST /start_weight_update", "POST /finish_weight_update",
                                  "POST /reset_prefix_cache", "POST /resume"));
  EXPECT_EQ(BodyOf("/start_weight_update"), "") << "vLLM's own client sends no body";
  EXPECT_EQ(nlohmann::json::parse(BodyOf("/finish_weight_update")),
            nlohmann::json({{"weight_version", "v7"}}));
}

TEST_F(VllmAdapterTest, OlderGenerationsGetNoVersionNoSessionAndTheirPauseMode) {
  version_ = "0.22.1";
  Start();
  VllmAdapter mid = Adapter(VllmOptions(false, VllmPauseMode::kWait, false, false));
  ASSERT_TRUE(mid.Probe().ok());
  Forget();
  ASSERT_TRUE(mid.PauseGeneration().ok());
  ASSERT_TRUE(mid.BeginUpdate(UpdateInfo{"u", "v"}).ok());
  ASSERT_TRUE(mid.FinishUpdate(UpdateInfo{"u", "v"}).ok());
  EXPECT_THAT(Seen(),
              ElementsAre("GET /is_sleeping", "POST /pause?mode=wait", "POST /start_weight_update",
                          "POST /finish_weight_update", "POST /resume"));
  EXPECT_EQ(BodyOf("/finish_weight_update"), "") << "0.22 reads no weight_version";
  version_ = "0.18.0";
  VllmAdapter old = Adapter();
  ASSERT_TRUE(old.Probe().ok());
  Forget();
  ASSERT_TRUE(old.PauseGeneration().ok());
  ASSERT_TRUE(old.BeginUpdate(UpdateInfo{"u", "v"}).ok());
  ASSERT_TRUE(old.FinishUpdate(UpdateInfo{"u", "v"}).ok());
  EXPECT_THAT(Seen(), ElementsAre("GET /is_sleeping", "POST /pause?mode=keep",
                                  "POST /reset_prefix_cache", "POST /resume"));
}

TEST_F(VllmAdapterTest, ASleepingEngineIsRefusedUnlessTheGroupMayWakeItsWeights) {
  sleeping_ = true;
  Start();
  VllmAdapter refuse = Adapter();
  ASSERT_TRUE(refuse.Probe().ok());
  Forget();
  absl::Status s = refuse.PauseGeneration();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("is asleep"));
  EXPECT_THAT(s.message(), HasSubstr("--vllm-wake-weights"));
  EXPECT_THAT(Seen(), ElementsAre("GET /is_sleeping")) << "not even paused";

  VllmAdapter wake = Adapter(VllmOptions(false, VllmPauseMode::kKeep, true, true));
  ASSERT_TRUE(wake.Probe().ok());
  Forget();
  ASSERT_TRUE(wake.PauseGeneration().ok());
  ASSERT_TRUE(wake.BeginUpdate(UpdateInfo{"u", "v"}).ok());
  ASSERT_TRUE(wake.FinishUpdate(UpdateInfo{"u", "v"}).ok());
  EXPECT_THAT(Seen(), ElementsAre("GET /is_sleeping", "POST /pause?mode=keep",
                                  "POST /wake_up?tags=weights", "POST /start_weight_update",
                                  "POST /finish_weight_update", "POST /reset_prefix_cache",
                                  "POST /wake_up?tags=kv_cache", "POST /resume"));
}

TEST_F(VllmAdapterTest, AFailedUpdateIsFinishedBestEffortThenResumed) {
  Start();
  VllmAdapter a = Adapter();
  ASSERT_TRUE(a.Probe().ok());
  ASSERT_TRUE(a.PauseGeneration().ok());
  ASSERT_TRUE(a.BeginUpdate(UpdateInfo{"u", "v"}).ok());
  Forget();
  // The core resumes the engines of an update that failed or was aborted.
  ASSERT_TRUE(a.ResumeGeneration().ok());
  EXPECT_THAT(Seen(), ElementsAre("POST /finish_weight_update", "POST /resume"));
  EXPECT_EQ(BodyOf("/finish_weight_update"), "") << "no version for weights that did not land";
  Forget();
  ASSERT_TRUE(a.ResumeGeneration().ok());
  EXPECT_THAT(Seen(), ElementsAre("POST /resume")) << "the session is closed once";
}

TEST_F(VllmAdapterTest, A409AtTheStartClosesTheStaleSessionAndAbortsTheUpdate) {
  Script("/start_weight_update", 409);
  Start();
  VllmAdapter a = Adapter();
  ASSERT_TRUE(a.Probe().ok());
  ASSERT_TRUE(a.PauseGeneration().ok());
  Forget();
  absl::Status s = a.BeginUpdate(UpdateInfo{"u", "v"});
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(s.message(), HasSubstr("start_weight_update answered HTTP 409"));
  EXPECT_THAT(s.message(), HasSubstr("push the whole version again"));
  EXPECT_THAT(s.message(), Not(HasSubstr(kSecret)));
  EXPECT_THAT(Seen(), ElementsAre("POST /start_weight_update", "POST /finish_weight_update"));
}

TEST_F(VllmAdapterTest, A409AtTheFinishFailsTheCommitAndLeavesTheEnginePaused) {
  Script("/finish_weight_update", 409);
  Start();
  VllmAdapter a = Adapter();
  ASSERT_TRUE(a.Probe().ok());
  ASSERT_TRUE(a.PauseGeneration().ok());
  ASSERT_TRUE(a.BeginUpdate(UpdateInfo{"u", "v"}).ok());
  Forget();
  absl::Status s = a.FinishUpdate(UpdateInfo{"u", "v"});
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(s.message(), HasSubstr("finish_weight_update answered HTTP 409"));
  EXPECT_THAT(Seen(), ElementsAre("POST /finish_weight_update"));
}

TEST(VllmBucketReply, FailuresAskForTheWholeVersionAndAConfigurationErrorSaysSo) {
  VllmAdapter a(EngineEndpoint{"http://e:1", 1, 1}, AdapterTimeouts{}, VllmOptions(),
                kCudaIpcDataPath);
  EXPECT_TRUE(a.CheckBucketReply(Reply(200, R"({"message": "Weights updated"})")).ok());
  absl::Status conflict = a.CheckBucketReply(Reply(409, kSecret));
  EXPECT_EQ(conflict.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(conflict.message(), HasSubstr("http://e:1/update_weights answered HTTP 409"));
  EXPECT_THAT(conflict.message(), HasSubstr("push the whole version again"));
  absl::Status failed = a.CheckBucketReply(Reply(500, kSecret));
  EXPECT_EQ(failed.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(failed.message(), HasSubstr("HTTP 500"));
  EXPECT_THAT(failed.message(), Not(HasSubstr(kSecret)));
  absl::Status config = a.CheckBucketReply(Reply(
      400, R"({"detail": "Refusing to deserialize without VLLM_ALLOW_INSECURE_SERIALIZATION=1"})"));
  EXPECT_EQ(config.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(config.message(), HasSubstr("VLLM_ALLOW_INSECURE_SERIALIZATION=1"));
}

TEST_F(VllmAdapterTest, HealthShowsTheVersionAndVariant) {
  version_ = "0.22.1";
  Start();
  EngineHealth health = Adapter().Health();
  EXPECT_TRUE(health.healthy) << health.error;
  EXPECT_EQ(health.engine_version, "0.22.1");
  EXPECT_EQ(health.variant, "ipc-args-session");
  EXPECT_FALSE(health.sleeping);
  EXPECT_THAT(Seen(), ElementsAre("GET /health", "GET /version", "GET /is_sleeping"));
}

TEST(VllmAdapter, EachBackendIsABindingAndTheGroupsRendezvousWithoutBucketRules) {
  VllmAdapter a(EngineEndpoint{"http://e:1", 1, 1}, AdapterTimeouts{}, VllmOptions(),
                kCudaIpcDataPath);
  EXPECT_NE(a.Binding(kCudaIpcDataPath), nullptr);
  EXPECT_NE(a.Binding(kBroadcastDataPath), nullptr);
  EXPECT_EQ(a.Binding(kCudaIpcStreamDataPath), nullptr);
  EXPECT_EQ(a.Capabilities().bucket_rules, BucketRules{})
      << "chunks are cut per request, not by the planner";
  EXPECT_THAT(BroadcastBindingOf(a).value()->RendezvousModes(),
              ElementsAre(RendezvousMode::kStatelessStore));
  EXPECT_FALSE(BroadcastBindingOf(a).value()->LeavesGroup());
  VllmAdapter uid(EngineEndpoint{"http://e:1", 1, 1}, AdapterTimeouts{},
                  VllmOptions(false, VllmPauseMode::kKeep, false, true, VllmRendezvous::kUniqueId),
                  kBroadcastDataPath);
  EXPECT_THAT(BroadcastBindingOf(uid).value()->RendezvousModes(),
              ElementsAre(RendezvousMode::kUniqueIdInInit));
}

TEST(VllmAdapter, NcclVersionGatesNameTheVersionAndTheMinimum) {
  const VllmOptions uid(false, VllmPauseMode::kKeep, false, true, VllmRendezvous::kUniqueId);
  auto old = VllmAdapter::CheckVersion({{"version", "0.15.1"}}, "http://e:1", VllmOptions(),
                                       VllmBackend::kNccl);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      old.status().message(),
      HasSubstr(
          "vLLM 0.15.1 is read as older than 0.16.0, the first release with NCCL weight transfer"));
  EXPECT_THAT(old.status().message(), HasSubstr(">= 0.16.0"));
  // A vendor build of the first release with the IPC engine is refused saying how it was read.
  auto vendor = VllmAdapter::CheckVersion({{"version", "0.17.0-sim"}}, "http://e:1", VllmOptions(),
                                          VllmBackend::kIpc);
  EXPECT_THAT(vendor.status().message(),
              HasSubstr("vLLM 0.17.0-sim, a pre-release of 0.17.0 (vendor suffix '-sim') is "
                        "read as older than 0.17.0"));
  // 0.16 has NCCL but no IPC: the transport decides which minimum applies.
  EXPECT_TRUE(VllmAdapter::CheckVersion({{"version", "0.16.0"}}, "http://e:1", VllmOptions(),
                                        VllmBackend::kNccl)
                  .ok());
  auto no_uid =
      VllmAdapter::CheckVersion({{"version", "0.29.2"}}, "http://e:1", uid, VllmBackend::kNccl);
  EXPECT_EQ(no_uid.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_uid.status().message(), HasSubstr("vLLM 0.29.2 reads no nccl_unique_id_b64"));
  EXPECT_THAT(no_uid.status().message(), HasSubstr("0.30.0"));
  auto found =
      VllmAdapter::CheckVersion({{"version", "0.30.0"}}, "http://e:1", uid, VllmBackend::kNccl);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(found->second.nccl_unique_id);
  EXPECT_EQ(found->second.nccl_packed_at, VllmPackedAt::kInitInfo);
  EXPECT_TRUE(found->second.session_routes);
}

TEST_F(VllmAdapterTest, ABroadcastProbeChecksTheWorkerCountAndInitsNothing) {
  version_ = "0.30.0";
  world_size_ = 4;
  Start();
  VllmAdapter wrong(EngineEndpoint{url_, 2, 1}, AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)},
                    VllmOptions(), kBroadcastDataPath);
  absl::Status s = wrong.Probe();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("has 4 worker(s)"));
  EXPECT_THAT(s.message(), HasSubstr("gives it 2 rank(s)"));
  EXPECT_THAT(Seen(), ElementsAre("GET /version", "GET /get_world_size?include_dp=true"))
      << "the NCCL group is initialised when the group forms, not at the probe";
  VllmAdapter right(EngineEndpoint{url_, 4, 1}, AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)},
                    VllmOptions(), kBroadcastDataPath);
  EXPECT_TRUE(right.Probe().ok());
}

}  // namespace
}  // namespace wsync
