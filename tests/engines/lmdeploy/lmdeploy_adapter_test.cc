// LmdeployAdapter against an in-process HTTP server: how it reads an LMDeploy server's routes,
// health and answers, the sleep/wakeup cut around an update, and what it refuses.

#include "daemon/engines/lmdeploy/lmdeploy_adapter.h"

#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

// An OpenAPI document listing `routes` as (path, method) pairs.
std::string OpenApi(const std::vector<std::pair<std::string, std::string>>& routes) {
  nlohmann::json paths = nlohmann::json::object();
  for (const auto& [path, method] : routes) paths[path][method] = {{"summary", kSecret}};
  return nlohmann::json{{"openapi", "3.1.0"}, {"info", {{"title", "FastAPI"}}}, {"paths", paths}}
      .dump();
}

const std::vector<std::pair<std::string, std::string>> kLmdeployRoutes = {
    {"/update_weights", "post"}, {"/sleep", "post"}, {"/wakeup", "post"},
    {"/is_sleeping", "get"},     {"/health", "get"}, {"/v1/chat/completions", "post"},
};

HttpReply Reply(int status, std::string body) {
  return HttpReply{status, std::move(body), "application/json"};
}

// An LMDeploy stand-in that records every request it is sent.
class LmdeployAdapterTest : public ::testing::Test {
 protected:
  void Start() {
    auto record = [this](int status, std::string body) {
      return [this, status, body](const SimHttpRequest& req, SimHttpResponse& res) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          requests_.push_back(req);
        }
        res.status = status;
        res.set_content(body, "application/json");
      };
    };
    server_.Get("/openapi.json", record(200, openapi_));
    server_.Get("/health", record(health_status_, R"({"status": "healthy"})"));
    server_.Get("/is_sleeping", record(200, R"({"is_sleeping": true})"));
    server_.Post("/sleep", record(200, ""));
    server_.Post("/wakeup", record(200, ""));
    server_.Post("/update_weights", record(200, "null"));
    auto port = server_.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    url_ = absl::StrCat("http://127.0.0.1:", *port);
  }
  LmdeployAdapter Adapter(uint32_t ranks = 1, BucketFormat format = BucketFormat::kFlattened) {
    return LmdeployAdapter(EngineEndpoint{url_, ranks, 1},
                           AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)},
                           LmdeployOptions(format), kCudaIpcDataPath);
  }
  // "POST /sleep?level=1" for each request, in order.
  std::vector<std::string> Seen() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> seen;
    for (const SimHttpRequest& r : requests_) {
      seen.push_back(absl::StrCat(r.method, " ", r.path, r.query.empty() ? "" : "?", r.query));
    }
    return seen;
  }
  std::vector<SimHttpRequest> Requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  void Forget() {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.clear();
  }

  std::string openapi_ = OpenApi(kLmdeployRoutes);
  int health_status_ = 200;
  SimHttpServer server_;
  std::string url_;
  std::mutex mu_;
  std::vector<SimHttpRequest> requests_;
};

TEST_F(LmdeployAdapterTest, ProbeReadsTheRoutesFromTheOpenApiDocument) {
  Start();
  LmdeployAdapter a = Adapter();
  ASSERT_TRUE(a.Probe().ok());
  EXPECT_FALSE(a.has_weights_update_group());
  EXPECT_THAT(Seen(), ElementsAre("GET /openapi.json"));
  // PR #4638's routes are noted for the NCCL path.
  auto newer = kLmdeployRoutes;
  newer.push_back({"/init_weights_update_group", "post"});
  auto found = LmdeployAdapter::CheckOpenApi(Reply(200, OpenApi(newer)), url_);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(*found);
}

TEST(LmdeployOpenApi, AServerWithoutTheDocumentIsRefusedNamingTheFlag) {
  // --disable-fastapi-docs: FastAPI serves no /openapi.json, a 404.
  auto none = LmdeployAdapter::CheckOpenApi(Reply(404, kSecret), "http://e:1");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("http://e:1/openapi.json answered HTTP 404"));
  EXPECT_THAT(none.status().message(), HasSubstr("--disable-fastapi-docs"));
  EXPECT_THAT(none.status().message(), Not(HasSubstr(kSecret)));
  // An answer that is no OpenAPI document: some other service, or an HTML page.
  for (const std::string& body :
       {std::string(kSecret), nlohmann::json{{"detail", kSecret}}.dump(),
        nlohmann::json{{"openapi", "3.1.0"}, {"paths", kSecret}}.dump()}) {
    auto other = LmdeployAdapter::CheckOpenApi(Reply(200, body), "http://e:1");
    EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition) << body;
    EXPECT_THAT(other.status().message(), HasSubstr("not an OpenAPI document"));
    EXPECT_THAT(other.status().message(), Not(HasSubstr(kSecret)));
  }
}

TEST(LmdeployOpenApi, ADocumentWithoutTheWeightRoutesIsRefusedNamingWhatIsMissing) {
  // An older LMDeploy, or another FastAPI server: what is missing is named in wsyncd's words,
  // and the document's own route names never reach the error.
  auto old =
      LmdeployAdapter::CheckOpenApi(Reply(200, OpenApi({{"/v1/chat/completions", "post"},
                                                        {"/update_weights", "get"},
                                                        {"/sleep", "post"},
                                                        {std::string("/") + kSecret, "get"}})),
                                    "http://e:1");
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.status().message(),
              HasSubstr("lists 4 route(s) but not POST /update_weights, POST /wakeup"));
  EXPECT_THAT(old.status().message(), Not(HasSubstr(kSecret)));
}

TEST_F(LmdeployAdapterTest, AnUpdateSleepsWakesTheWeightsThenTheKvCache) {
  Start();
  LmdeployAdapter a = Adapter(/*ranks=*/2);
  const UpdateInfo update{"u-1", "v1"};
  ASSERT_TRUE(a.PauseGeneration().ok());
  ASSERT_TRUE(a.BeginUpdate(update).ok());
  // The trainer marked its last bucket: the bucket carries finished, and FinishUpdate only wakes.
  BucketManifest m;
  m.tensors = {TensorEntry{"w", DType::kBfloat16, {4}, 0, 8}};
  std::vector<IpcBucketView> views(
      2, IpcBucketView{"gpu", MemoryKind::kHostShm, "/wsync-1-d0-0-ab", 1 << 20, 0, ""});
  auto last = IpcBindingOf(a).value()->BucketRequest(m, views,
                                                     BucketContext{"u-1", "v1", 0, /*last=*/true});
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->path, "/update_weights");
  EXPECT_EQ(nlohmann::json::parse(last->json_body)["finished"], true);
  ASSERT_TRUE(a.FinishUpdate(update).ok());
  EXPECT_THAT(Seen(), ElementsAre("POST /sleep?level=1", "POST /wakeup?tags=weights",
                                  "POST /wakeup?tags=kv_cache"));
  // LMDeploy refuses even a bodiless /sleep or /wakeup without the JSON content type.
  for (const SimHttpRequest& r : Requests()) {
    EXPECT_EQ(r.content_type, "application/json") << r.path;
  }
  // A resume after a failed or aborted update wakes whatever sleeps.
  Forget();
  ASSERT_TRUE(a.ResumeGeneration().ok());
  EXPECT_THAT(Seen(), ElementsAre("POST /wakeup"));
}

TEST_F(LmdeployAdapterTest, WithoutALastBucketFinishUpdateSendsAFinishOnlyRequest) {
  Start();
  LmdeployAdapter a = Adapter(/*ranks=*/2);
  BucketManifest m;
  m.tensors = {TensorEntry{"w", DType::kBfloat16, {4}, 0, 8}};
  std::vector<IpcBucketView> views(
      2, IpcBucketView{"gpu", MemoryKind::kHostShm, "/wsync-1-d0-0-ab", 1 << 20, 0, ""});
  // An earlier update's last bucket does not finish this one.
  ASSERT_TRUE(
      IpcBindingOf(a).value()->BucketRequest(m, views, BucketContext{"u-0", "v0", 0, true}).ok());
  auto unmarked =
      IpcBindingOf(a).value()->BucketRequest(m, views, BucketContext{"u-1", "v1", 0, false});
  ASSERT_TRUE(unmarked.ok());
  EXPECT_EQ(nlohmann::json::parse(unmarked->json_body)["finished"], false);
  ASSERT_TRUE(a.FinishUpdate(UpdateInfo{"u-1", "v1"}).ok());
  EXPECT_THAT(Seen(), ElementsAre("POST /update_weights", "POST /wakeup?tags=kv_cache"));
  const nlohmann::json body = nlohmann::json::parse(Requests()[0].body);
  EXPECT_EQ(body["finished"], true);
  EXPECT_EQ(body["load_format"], "flattened_bucket");
  EXPECT_EQ(body["serialized_named_tensors"].size(), 2u) << "one entry per TP rank";
}

// Whether rank `r` of a request carries flattened_tensor.
bool SendsTensor(const EngineRequest& request, size_t r) {
  const nlohmann::json body = nlohmann::json::parse(request.json_body);
  std::string pickle;
  EXPECT_TRUE(
      absl::Base64Unescape(body["serialized_named_tensors"][r].get<std::string>(), &pickle));
  return absl::StrContains(pickle, "flattened_tensor");
}

TEST_F(LmdeployAdapterTest, TheFlattenedTensorGoesOncePerUpdateRankAllocationAndDtype) {
  Start();
  LmdeployAdapter a = Adapter(/*ranks=*/2);
  BucketManifest bf16;
  bf16.tensors = {TensorEntry{"w", DType::kBfloat16, {4}, 0, 8}};
  BucketManifest f32;
  f32.tensors = {TensorEntry{"n", DType::kFloat32, {4}, 0, 16}};
  // Two slots of one 4 MiB allocation per GPU, and an oversize slot of its own.
  auto slot = [](int device, uint32_t i) {
    return IpcBucketView{"gpu",   MemoryKind::kHostShm, absl::StrCat("/wsync-1-d", device, "-0-ab"),
                         4 << 20, uint64_t{i} << 21,    ""};
  };
  const std::vector<IpcBucketView> s0 = {slot(0, 0), slot(1, 0)};
  const std::vector<IpcBucketView> s1 = {slot(0, 1), slot(1, 1)};
  std::vector<IpcBucketView> oversize = s0;
  oversize[1].memory_handle = "/wsync-1-d1-1-cd";
  oversize[1].offset = 0;
  ASSERT_TRUE(a.PauseGeneration().ok());
  auto send = [&](const BucketManifest& m, const std::vector<IpcBucketView>& views,
                  const std::string& update, bool last = false) {
    auto request =
        IpcBindingOf(a).value()->BucketRequest(m, views, BucketContext{update, "v", 0, last});
    EXPECT_TRUE(request.ok()) << request.status();
    return std::vector<bool>{SendsTensor(*request, 0), SendsTensor(*request, 1)};
  };
  using V = std::vector<bool>;
  EXPECT_EQ(send(bf16, s0, "u-1"), V({true, true})) << "the update's first request";
  EXPECT_EQ(send(bf16, s1, "u-1"), V({false, false})) << "another slot of the same allocation";
  EXPECT_EQ(send(bf16, s0, "u-1"), V({false, false}));
  EXPECT_EQ(send(f32, s1, "u-1"), V({true, true})) << "another dtype";
  EXPECT_EQ(send(f32, s0, "u-1"), V({false, false}));
  EXPECT_EQ(send(f32, oversize, "u-1"), V({false, true})) << "rank 1's oversize slot";
  EXPECT_EQ(send(f32, s1, "u-1"), V({false, true}));
  // A failed answer leaves what the workers hold unknown: sent again.
  EXPECT_FALSE(a.CheckBucketReply(HttpReply{500, "boom", "text/plain"}).ok());
  EXPECT_EQ(send(f32, s0, "u-1"), V({true, true}));
  EXPECT_EQ(send(f32, s1, "u-1", /*last=*/true), V({false, false}));
  // `finished` dropped it; so does a new update (which began with a sleep).
  EXPECT_EQ(send(f32, s0, "u-1"), V({true, true}));
  EXPECT_EQ(send(f32, s0, "u-2"), V({true, true}));
  EXPECT_EQ(send(f32, s1, "u-2"), V({false, false}));
  ASSERT_TRUE(a.PauseGeneration().ok());
  EXPECT_EQ(send(f32, s1, "u-2"), V({true, true})) << "a sleep drops it";
  // Per tensor, nothing is cached: no flattened tensor at all.
  LmdeployAdapter per_tensor = Adapter(/*ranks=*/2, BucketFormat::kPerTensor);
  auto request = IpcBindingOf(per_tensor)
                     .value()
                     ->BucketRequest(bf16, s0, BucketContext{"u-3", "v", 0, false});
  ASSERT_TRUE(request.ok());
  EXPECT_FALSE(SendsTensor(*request, 0));
}

TEST(LmdeployBucketReply, OnlyNullWithHttp200IsALoadedBucket) {
  LmdeployAdapter a(EngineEndpoint{"http://e:1", 1, 1}, AdapterTimeouts{}, LmdeployOptions(),
                    kCudaIpcDataPath);
  EXPECT_TRUE(a.CheckBucketReply(Reply(200, "null")).ok());
  EXPECT_TRUE(a.CheckBucketReply(Reply(200, "null\n")).ok());
  for (const HttpReply& reply :
       {Reply(200, R"({"success": true})"), Reply(200, ""), Reply(204, "")}) {
    absl::Status s = a.CheckBucketReply(reply);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << reply.body;
    EXPECT_THAT(s.message(), HasSubstr("not LMDeploy's answer"));
  }
  // An exception while loading: the status, never the traceback.
  absl::Status failed = a.CheckBucketReply(Reply(500, kSecret));
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(failed.message(), HasSubstr("http://e:1/update_weights answered HTTP 500"));
  EXPECT_THAT(failed.message(), Not(HasSubstr(kSecret)));
}

TEST(LmdeployBucketReply, APickleRefusalNamesTheServersOptIn) {
  LmdeployAdapter a(EngineEndpoint{"http://e:1", 1, 1}, AdapterTimeouts{}, LmdeployOptions(),
                    kCudaIpcDataPath);
  const std::string refusal = absl::StrCat(
      R"({"error": {"message": "Pickle payloads are disabled on HTTP /update_weights )", kSecret,
      R"("}})");
  absl::Status s = a.CheckBucketReply(Reply(400, refusal));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS=1"));
  EXPECT_THAT(s.message(), Not(HasSubstr(kSecret)));
  // Another 400 (a request LMDeploy could not validate) is no hint about the variable.
  absl::Status other = a.CheckBucketReply(Reply(400, R"({"error": "Unsupported Media Type"})"));
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), Not(HasSubstr("LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS")));
}

TEST_F(LmdeployAdapterTest, HealthIsTheHealthRouteAndSaysWhetherTheEngineSleeps) {
  Start();
  LmdeployAdapter a = Adapter();
  EngineHealth health = a.Health();
  EXPECT_TRUE(health.healthy) << health.error;
  EXPECT_TRUE(health.sleeping);
  // No version route, and Health does not read the routes itself: until a Probe has, it says so.
  EXPECT_EQ(health.engine_version, "not probed");
  EXPECT_THAT(Seen(), ElementsAre("GET /health", "GET /is_sleeping"));
  ASSERT_TRUE(a.Probe().ok());
  health = a.Health();
  EXPECT_EQ(health.engine_version, "routes before PR #4638");
  EXPECT_EQ(health.variant, "ipc flattened_bucket");
  EXPECT_TRUE(health.error.empty());
}

TEST_F(LmdeployAdapterTest, AnUnhealthyEngineIsNamedWithItsStatus) {
  health_status_ = 503;
  Start();
  EngineHealth health = Adapter().Health();
  EXPECT_FALSE(health.healthy);
  EXPECT_THAT(health.error, HasSubstr("/health answered HTTP 503"));
}

TEST(LmdeployAdapter, FlattenedBucketsHoldOneDtypeOnBothPaths) {
  LmdeployAdapter flat(EngineEndpoint{"http://e:1", 1, 1}, AdapterTimeouts{}, LmdeployOptions(),
                       kCudaIpcDataPath);
  const AdapterCapabilities caps = flat.Capabilities();
  EXPECT_NE(flat.Binding(kCudaIpcDataPath), nullptr);
  EXPECT_NE(flat.Binding(kBroadcastDataPath), nullptr);
  EXPECT_THAT(BroadcastBindingOf(flat).value()->RendezvousModes(),
              ElementsAre(RendezvousMode::kTorchStore));
  EXPECT_TRUE(caps.bucket_rules.one_dtype) << "the client's planner cuts buckets at a dtype change";
  BucketManifest mixed;
  mixed.tensors = {TensorEntry{"a", DType::kBfloat16, {2}, 0, 4},
                   TensorEntry{"b", DType::kFloat32, {1}, 4, 4}};
  EXPECT_THAT(flat.ValidateBucket(mixed).message(), HasSubstr("tensor 'b' is float32"));
  LmdeployAdapter per_tensor(EngineEndpoint{"http://e:1", 1, 1}, AdapterTimeouts{},
                             LmdeployOptions(BucketFormat::kPerTensor), kCudaIpcDataPath);
  EXPECT_FALSE(per_tensor.Capabilities().bucket_rules.one_dtype);
  EXPECT_TRUE(per_tensor.ValidateBucket(mixed).ok());
}

TEST(LmdeployNccl, RequestsCarryTheGroupNameTheFormatAndFinishedAsLmdeployReadsThem) {
  LmdeployAdapter flat(EngineEndpoint{"http://e:1", 2, 1}, AdapterTimeouts{}, LmdeployOptions(),
                       kBroadcastDataPath);
  BucketManifest bucket;
  bucket.tensors = {TensorEntry{"a", DType::kBfloat16, {2, 3}, 0, 12},
                    TensorEntry{"b", DType::kBfloat16, {5}, 12, 10}};
  auto request = BroadcastBindingOf(flat).value()->BucketRequest(
      bucket, "wsync-g", BucketContext{"u1", "v1", 0, true});
  ASSERT_TRUE(request.ok());
  EXPECT_EQ(request->path, "/update_weights_from_distributed");
  EXPECT_EQ(nlohmann::json::parse(request->json_body),
            (nlohmann::json{{"names", {"a", "b"}},
                            {"dtypes", {"bfloat16", "bfloat16"}},
                            {"shapes", {{2, 3}, {5}}},
                            {"group_name", "wsync-g"},
                            {"load_format", "flattened_bucket"},
                            {"finished", true}}));
  // One element-typed broadcast of the concatenation (the old SGLang layout).
  auto pieces = BroadcastBindingOf(flat).value()->Pieces(bucket);
  ASSERT_TRUE(pieces.ok());
  ASSERT_EQ(pieces->size(), 1u);
  EXPECT_EQ((*pieces)[0].dtype, DType::kBfloat16);
  EXPECT_EQ((*pieces)[0].count, 11u);
  // Mixed dtypes (FlattenedTensorBucket raises) and a gap (not one concatenation) are refused
  // before any byte moves.
  BucketManifest mixed = bucket;
  mixed.tensors[1].dtype = DType::kFloat16;
  EXPECT_EQ(flat.ValidateBucket(mixed).code(), absl::StatusCode::kInvalidArgument);
  BucketManifest gap = bucket;
  gap.tensors[1].offset = 16;
  EXPECT_FALSE(flat.ValidateBucket(gap).ok());
  LmdeployAdapter per_tensor(EngineEndpoint{"http://e:1", 2, 1}, AdapterTimeouts{},
                             LmdeployOptions(BucketFormat::kPerTensor), kBroadcastDataPath);
  pieces = BroadcastBindingOf(per_tensor).value()->Pieces(mixed);
  ASSERT_TRUE(pieces.ok());
  ASSERT_EQ(pieces->size(), 2u);
  EXPECT_EQ((*pieces)[1].dtype, DType::kFloat16);
  EXPECT_EQ((*pieces)[1].count, 5u);
  EXPECT_TRUE(nlohmann::json::parse(BroadcastBindingOf(per_tensor)
                                        .value()
                                        ->BucketRequest(mixed, "g", BucketContext{})
                                        ->json_body)
                  .at("load_format")
                  .is_null());
  // {success, message} answers; 501 is another backend, a configuration error.
  EXPECT_TRUE(flat.CheckBucketReply(Reply(200, R"({"success": true, "message": "ok"})")).ok());
  EXPECT_FALSE(flat.CheckBucketReply(Reply(400, R"({"success": false, "message": "x"})")).ok());
  absl::Status other = flat.CheckBucketReply(Reply(501, R"({"detail": "Not Implemented"})"));
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("pytorch backend"));
}

TEST_F(LmdeployAdapterTest, ABroadcastGroupNeedsTheInitRouteOfPr4638) {
  Start();
  LmdeployAdapter a(EngineEndpoint{url_, 1, 1}, AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)},
                    LmdeployOptions(), kBroadcastDataPath);
  absl::Status probed = a.Probe();
  EXPECT_EQ(probed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(probed.message(), HasSubstr("without POST /init_weights_update_group (PR #4638"));
  EngineHealth health = a.Health();
  EXPECT_TRUE(health.healthy);
  EXPECT_EQ(health.variant, "unsupported");
  EXPECT_THAT(health.error, HasSubstr("PR #4638"));
}

TEST_F(LmdeployAdapterTest, TheRoutesOfPr4638AreTheVersionAndNcclTheVariant) {
  openapi_ = OpenApi({{"/update_weights", "post"},
                      {"/sleep", "post"},
                      {"/wakeup", "post"},
                      {"/init_weights_update_group", "post"},
                      {"/update_weights_from_distributed", "post"},
                      {"/destroy_weights_update_group", "post"}});
  Start();
  LmdeployAdapter a(EngineEndpoint{url_, 2, 1}, AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)},
                    LmdeployOptions(BucketFormat::kPerTensor), kBroadcastDataPath);
  ASSERT_TRUE(a.Probe().ok());
  EngineHealth health = a.Health();
  EXPECT_EQ(health.engine_version, "routes of PR #4638");
  EXPECT_EQ(health.variant, "nccl per_tensor");
  EXPECT_TRUE(health.error.empty()) << health.error;
}

}  // namespace
}  // namespace wsync
