#include "daemon/engines/sglang/sglang_adapter.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/net.h"
#include "daemon/core/weight_group.h"
#include "daemon/engines/sglang/sglang_broadcast_binding.h"
#include "daemon/transport/broadcast/broadcast_binding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_http_server.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

// A service that is no engine: what it answers must never reach whoever pointed a group at it.
class NotAnEngine : public ::testing::Test {
 protected:
  static constexpr char kSecret[] = "internal-secret-7f3a";
  void SetUp() override {
    auto reply = [](int status, std::string body, std::string type = "text/plain") {
      return [=](const SimHttpRequest&, SimHttpResponse& res) {
        res.status = status;
        res.set_content(body, type);
      };
    };
    const std::string secret_json =
        absl::StrCat(R"({"success": false, "message": ")", kSecret, R"("})");
    server_.Get("/get_server_info", reply(200, kSecret));
    server_.Post("/init_weights_update_group", reply(400, secret_json, "application/json"));
    server_.Post("/pause_generation", reply(500, kSecret));
    server_.Post("/continue_generation", reply(403, kSecret));
    server_.Post("/update_weight_version", reply(200, R"({"success": true})", "application/json"));
    server_.Post("/flush_cache", reply(400, kSecret));
    auto port = server_.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    url_ = absl::StrCat("http://127.0.0.1:", *port);
  }
  SglangAdapter Adapter() {
    return SglangAdapter(EngineEndpoint{url_, 1, 1},
                         AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)},
                         SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
  }
  static void ExpectNamedNotEchoed(const absl::Status& s, const std::string& route, int status) {
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(route));
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("HTTP ", status)));
    EXPECT_THAT(s.message(), ::testing::Not(HasSubstr(kSecret))) << s;
  }
  SimHttpServer server_;
  std::string url_;
};

TEST_F(NotAnEngine, ErrorsNameTheEngineRouteAndStatusButNeverItsAnswer) {
  SglangAdapter a = Adapter();
  absl::Status probe = a.Probe();
  EXPECT_EQ(probe.code(), absl::StatusCode::kInternal);
  ExpectNamedNotEchoed(probe, url_ + "/get_server_info", 200);
  absl::Status init = BroadcastBindingOf(a).value()->InitGroup(
      Rendezvous{"127.0.0.1", 1, 2, "g", RendezvousMode::kTorchStore, ""});
  EXPECT_EQ(init.code(), absl::StatusCode::kFailedPrecondition);
  ExpectNamedNotEchoed(init, url_ + "/init_weights_update_group", 400);
  EXPECT_THAT(init.message(), HasSubstr("success=false"));
  absl::Status pause = a.PauseGeneration();
  EXPECT_EQ(pause.code(), absl::StatusCode::kInternal);
  ExpectNamedNotEchoed(pause, url_ + "/pause_generation", 500);
  absl::Status resume = a.ResumeGeneration();
  EXPECT_EQ(resume.code(), absl::StatusCode::kFailedPrecondition);
  ExpectNamedNotEchoed(resume, url_ + "/continue_generation", 403);
  ExpectNamedNotEchoed(a.FinishUpdate(UpdateInfo{"u1", "v1"}), url_ + "/flush_cache", 400);
  ExpectNamedNotEchoed(a.CheckBucketReply(HttpReply{500, kSecret, "text/plain"}),
                       url_ + "/update_weights_from_distributed", 500);
  EngineHealth health = a.Health();
  EXPECT_FALSE(health.healthy);
  EXPECT_THAT(health.error, ::testing::Not(HasSubstr(kSecret)));
}

// An SGLang server that refuses: what it says reaches the caller once it answered as an engine.
TEST(SglangAdapterReasons, AnIdentifiedEnginesReasonIsCarriedCutAndEscaped) {
  SimHttpServer server;
  auto json = [](int status, nlohmann::json body) {
    return [=](const SimHttpRequest&, SimHttpResponse& res) {
      res.status = status;
      res.set_content(body.dump(), "application/json");
    };
  };
  server.Get("/get_server_info", json(200, {{"version", "0.5.6"}, {"tp_size", 1}}));
  server.Get("/openapi.json",
             [](const SimHttpRequest&, SimHttpResponse& res) { res.status = 404; });
  server.Get("/begin_weight_update",
             [](const SimHttpRequest&, SimHttpResponse& res) { res.status = 404; });
  server.Get("/update_weight_version",
             [](const SimHttpRequest&, SimHttpResponse& res) { res.status = 405; });
  // What a server whose group an earlier wsyncd left behind answers.
  server.Post("/init_weights_update_group",
              json(400, {{"success", false},
                         {"message", "Failed to init group: already initialized\nforged line"}}));
  server.Post("/pause_generation", json(500, {{"detail", std::string(2000, 'x')}}));
  auto port = server.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  const std::string url = absl::StrCat("http://127.0.0.1:", *port);
  SglangAdapter a(EngineEndpoint{url, 1, 1}, AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)},
                  SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
  const Rendezvous rendezvous{"127.0.0.1", 1, 2, "g", RendezvousMode::kTorchStore, ""};
  // Before the probe it is any service: its words stay in the log.
  absl::Status before = BroadcastBindingOf(a).value()->InitGroup(rendezvous);
  EXPECT_THAT(before.message(), HasSubstr("(its answer is logged at debug level)"));
  EXPECT_THAT(before.message(), ::testing::Not(HasSubstr("already initialized")));

  ASSERT_TRUE(a.Probe().ok());
  absl::Status init = BroadcastBindingOf(a).value()->InitGroup(rendezvous);
  EXPECT_EQ(init.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(init.message(),
              HasSubstr(url + "/init_weights_update_group answered success=false (HTTP 400): the "
                              "engine refused the request; the engine says: Failed to init group: "
                              "already initialized\\x0aforged line"));
  absl::Status pause = a.PauseGeneration();
  EXPECT_EQ(pause.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(pause.message(), HasSubstr("the engine failed the request; the engine says: xxx"));
  EXPECT_THAT(pause.message(), ::testing::Not(HasSubstr(std::string(600, 'x'))))
      << "cut to " << EngineHttp::kMaxEngineReasonBytes << " bytes";
}

TEST(EngineHttp, EveryWayOfNotAnsweringReadsTheSame) {
  // Closed port, a port that accepts and never answers, a port that accepts and hangs up: which
  // of these a host:port is must not be learnt from the error of a group pointed at it.
  auto closed = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(closed.ok());
  const uint16_t closed_port = *LocalPort(closed->get());
  closed->reset();
  auto silent = ListenTcp("127.0.0.1", 0);  // the kernel accepts; nobody reads
  ASSERT_TRUE(silent.ok());
  auto hangup = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(hangup.ok());
  std::atomic<bool> stop{false};
  std::thread closer([&] {
    while (!stop) {
      pollfd p{hangup->get(), POLLIN, 0};
      if (::poll(&p, 1, 20) == 1) ::close(::accept(hangup->get(), nullptr, nullptr));
    }
  });
  std::set<std::string> messages;
  for (uint16_t port : {closed_port, *LocalPort(silent->get()), *LocalPort(hangup->get())}) {
    const std::string url = absl::StrCat("http://127.0.0.1:", port);
    SglangAdapter a(EngineEndpoint{url, 1, 1},
                    AdapterTimeouts{absl::Milliseconds(300), absl::Milliseconds(300)},
                    SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
    absl::Status s = a.Probe();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    std::string message(s.message());
    messages.insert(message.replace(message.find(url), url.size(), "URL"));
  }
  stop = true;
  closer.join();
  EXPECT_THAT(messages, ::testing::ElementsAre("GET URL/get_server_info: engine unreachable"));
}

TEST(SglangAdapter, InitBodyHasSglangsFieldsAndRankOffset) {
  nlohmann::json body = SglangBroadcastBinding::InitGroupBody(
      Rendezvous{"10.0.0.1", 29500, 4, "policy", RendezvousMode::kTorchStore, ""}, 2);
  EXPECT_EQ(body, nlohmann::json::parse(R"({"master_address": "10.0.0.1", "master_port": 29500,
      "rank_offset": 2, "world_size": 4, "group_name": "policy", "backend": "nccl"})"));
}

TEST(SglangAdapter, BucketBodyListsTensorsInLayoutOrderAsAFlattenedBucket) {
  BucketManifest m{{TensorEntry{"w", DType::kBfloat16, {2, 3}, 0, 12},
                    TensorEntry{"n", DType::kFloat32, {3}, 12, 12}}};
  nlohmann::json body = SglangBroadcastBinding::BucketBody(m, "policy", BucketFormat::kFlattened);
  EXPECT_EQ(body, nlohmann::json::parse(R"({"names": ["w", "n"], "dtypes": ["bfloat16", "float32"],
      "shapes": [[2, 3], [3]], "group_name": "policy", "flush_cache": false,
      "abort_all_requests": false, "load_format": "flattened_bucket"})"));
  SglangAdapter a(EngineEndpoint{"http://127.0.0.1:1", 1, 1}, AdapterTimeouts{},
                  SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
  std::vector<BroadcastPiece> pieces = *BroadcastBindingOf(a).value()->Pieces(m);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].offset, 0u);
  EXPECT_EQ(pieces[0].count, 24u);
  EXPECT_EQ(pieces[0].dtype, DType::kUint8);
}

TEST(SglangAdapter, PerTensorBucketHasNullLoadFormatAndOneTypedBroadcastPerTensor) {
  BucketManifest m{{TensorEntry{"w", DType::kBfloat16, {2, 3}, 0, 12},
                    TensorEntry{"n", DType::kFloat32, {3}, 16, 12}}};
  nlohmann::json body = SglangBroadcastBinding::BucketBody(m, "policy", BucketFormat::kPerTensor);
  EXPECT_TRUE(body["load_format"].is_null());
  EXPECT_EQ(body["names"], nlohmann::json::parse(R"(["w", "n"])"));
  SglangAdapter a(EngineEndpoint{"http://127.0.0.1:1", 1, 1}, AdapterTimeouts{},
                  SglangOptions(BucketFormat::kPerTensor), kBroadcastDataPath);
  EXPECT_TRUE(a.ValidateBucket(m).ok()) << "a gap is fine when each tensor has its own broadcast";
  std::vector<BroadcastPiece> pieces = *BroadcastBindingOf(a).value()->Pieces(m);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].offset, 0u);
  EXPECT_EQ(pieces[0].count, 6u);
  EXPECT_EQ(pieces[0].dtype, DType::kBfloat16);
  EXPECT_EQ(pieces[1].offset, 16u);
  EXPECT_EQ(pieces[1].count, 3u);
  EXPECT_EQ(pieces[1].dtype, DType::kFloat32);
  BucketManifest shorts{{TensorEntry{"s", DType::kInt16, {4}, 0, 8}}};
  EXPECT_THAT(a.ValidateBucket(shorts).message(), HasSubstr("int16"));
  SglangAdapter flat(EngineEndpoint{"http://127.0.0.1:1", 1, 1}, AdapterTimeouts{},
                     SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
  EXPECT_THAT(flat.ValidateBucket(m).message(), HasSubstr("back to back"));
}

// Found by the fault matrix: a /get_server_info whose tp_size was a string threw out of Probe
// and ended wsyncd (std::terminate); a float was cast to int (undefined).
TEST(SglangAdapter, ServerInfoThatIsNotSglangsIsRefusedNotThrown) {
  const EngineEndpoint endpoint{"http://127.0.0.1:9", 2, 1};
  for (const char* info : {R"({"tp_size": "2"})", R"({"tp_size": 1e30})", R"({"tp_size": 2.0})",
                           R"({"tp_size": 2, "pp_size": [1]})", R"({"pp_size": null})"}) {
    const absl::Status s = SglangAdapter::CheckServerInfo(nlohmann::json::parse(info), endpoint);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << info;
    EXPECT_THAT(s.message(), HasSubstr("is not an integer: not an SGLang server")) << info;
  }
  EXPECT_THAT(SglangAdapter::CheckServerInfo(
                  nlohmann::json::parse(R"({"tp_size": 18446744073709551615})"), endpoint)
                  .message(),
              HasSubstr("runs tp_size 4294967296 but the group declares 2"));
  EXPECT_THAT(SglangAdapter::CheckServerInfo(nlohmann::json::parse(R"({"tp_size": 4})"), endpoint)
                  .message(),
              HasSubstr("runs tp_size 4 but the group declares 2"));
  EXPECT_THAT(SglangAdapter::CheckServerInfo(
                  nlohmann::json::parse(R"({"tp_size": 2, "pp_size": 2})"), endpoint)
                  .message(),
              HasSubstr("pp_size > 1"));
  EXPECT_TRUE(
      SglangAdapter::CheckServerInfo(
          nlohmann::json::parse(R"({"tp_size": 2, "pp_size": 1, "version": "0.5.6"})"), endpoint)
          .ok());
  EXPECT_TRUE(SglangAdapter::CheckServerInfo(nlohmann::json::object(), endpoint).ok());
}

TEST(SglangAdapter, UnreachableEngineIsUnavailableAndNamed) {
  SglangAdapter a(EngineEndpoint{"http://127.0.0.1:1", 1, 1}, AdapterTimeouts{},
                  SglangOptions(BucketFormat::kFlattened), kBroadcastDataPath);
  absl::Status s = a.Probe();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("http://127.0.0.1:1/get_server_info"));
  EXPECT_FALSE(a.Health().healthy);
}

}  // namespace
}  // namespace wsync
