// SGLang's version as /get_server_info reports it, and the colocated payload each version gets:
// the parse (post, rc, dev and local suffixes, unknown strings), each gate of sglang_version.h, and
// SglangAdapter's Probe and Health against an in-process server that reports a version.

#include "daemon/engines/sglang/sglang_version.h"

#include <mutex>
#include <string>

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

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

SglangVersion Parsed(const std::string& text) {
  auto v = ParseSglangVersion(text);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.ok() ? *v : SglangVersion{};
}

TEST(SglangVersionTest, ReadsReleasesPostReleasesAndLocalLabels) {
  for (const char* text : {"0.5.6", "v0.5.6", " 0.5.6\n", "0.5.6.post1", "0.5.6post2",
                           "0.5.6+cu130", "0.5.6.post1+cu128"}) {
    SglangVersion v = Parsed(text);
    EXPECT_EQ(v.major, 0) << text;
    EXPECT_EQ(v.minor, 5) << text;
    EXPECT_EQ(v.patch, 6) << text;
    EXPECT_FALSE(v.prerelease) << text;
    EXPECT_TRUE(v.AtLeast(0, 5, 6)) << text;
    EXPECT_FALSE(v.AtLeast(0, 5, 7)) << text;
  }
  EXPECT_EQ(Parsed(" 0.5.6.post1 ").text, "0.5.6.post1");
  SglangVersion two = Parsed("0.5");
  EXPECT_EQ(two.patch, 0);
  EXPECT_TRUE(two.AtLeast(0, 5, 0));
  EXPECT_TRUE(Parsed("0.5.post1").AtLeast(0, 5, 0));
  EXPECT_TRUE(Parsed("1.0.0").AtLeast(0, 5, 6));
}

TEST(SglangVersionTest, RefusesOverlongText) {
  EXPECT_FALSE(ParseSglangVersion(absl::StrCat("0.5.6+", std::string(64, 'a'))).ok());
}

TEST(SglangVersionTest, PreReleasesAndUnknownSuffixesCountAsTheReleaseBefore) {
  for (const char* text : {"0.5.6rc0", "0.5.6.rc1", "0.5.6.dev12+g1234abc", "0.5.6a1", "0.5.6b2",
                           "0.5.6-ipc-sim", "0.5.6.postfix", "0.5.6.post1rc1", "0.5.dev3"}) {
    SglangVersion v = Parsed(text);
    EXPECT_TRUE(v.prerelease) << text;
    EXPECT_FALSE(v.AtLeast(0, 5, 6)) << text;
  }
  EXPECT_TRUE(Parsed("0.5.6rc0").AtLeast(0, 5, 5));
}

TEST(SglangVersionTest, RefusesWhatIsNotAVersion) {
  for (const char* text : {"", "v", "sglang", "0", "0.", ".5.6", "x0.5.6", "0.x.6", "99999999.1.1",
                           "0.5.6 evil", "0.5.6\x01"}) {
    EXPECT_FALSE(ParseSglangVersion(text).ok()) << text;
  }
}

TEST(SglangVersionTest, CurrentServersGetTheUint8FlattenedBucket) {
  for (const char* text : {"0.5.6", "0.5.6.post1", "0.5.19", "0.6.0rc0"}) {
    auto v = SglangIpcVariantFor(Parsed(text), BucketFormat::kFlattened);
    ASSERT_TRUE(v.ok()) << text << ": " << v.status();
    EXPECT_EQ(v->name, "ipc uint8-flattened");
    EXPECT_EQ(v->format, BucketFormat::kFlattened);
  }
}

TEST(SglangVersionTest, OldServersAreRefusedTheFlattenedBucketNamingBothVersions) {
  for (const char* text : {"0.5.5", "0.5.5.post3", "0.5.6rc0", "0.5.1"}) {
    auto v = SglangIpcVariantFor(Parsed(text), BucketFormat::kFlattened);
    ASSERT_FALSE(v.ok()) << text;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(v.status().message(),
                AllOf(HasSubstr(absl::StrCat("SGLang ", text)), HasSubstr(">= 0.5.6"),
                      HasSubstr("PR #13413"), HasSubstr("--load-format per_tensor")));
  }
}

TEST(SglangVersionTest, PerTensorServesEverySupportedServer) {
  for (const char* text : {"0.5.1", "0.5.5.post3", "0.5.6", "0.5.19"}) {
    auto v = SglangIpcVariantFor(Parsed(text), BucketFormat::kPerTensor);
    ASSERT_TRUE(v.ok()) << text << ": " << v.status();
    EXPECT_EQ(v->name, "ipc per-tensor");
    EXPECT_EQ(v->format, BucketFormat::kPerTensor);
  }
}

TEST(SglangVersionTest, ServersBeforeTheIpcFloorAreRefusedInEveryFormat) {
  for (BucketFormat format : {BucketFormat::kFlattened, BucketFormat::kPerTensor}) {
    for (const char* text : {"0.5.0", "0.5.1rc0", "0.4.10.post2", "0.4.6"}) {
      auto v = SglangIpcVariantFor(Parsed(text), format);
      ASSERT_FALSE(v.ok()) << text;
      EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(v.status().message(),
                  AllOf(HasSubstr(absl::StrCat("SGLang ", text)), HasSubstr(">= 0.5.1")));
    }
  }
}

TEST(SglangVersionTest, TheMapOnceRouteNeedsItsOwnFloorWhateverTheFormat) {
  for (const char* text : {"0.5.5", "0.5.5.post2", "0.5.6", "0.6.0"}) {
    auto v = SglangIpcRouteVariantFor(Parsed(text));
    ASSERT_TRUE(v.ok()) << text << ": " << v.status();
    EXPECT_EQ(v->name, "ipc stream (map once)");
  }
  for (const char* text : {"0.5.4", "0.5.5rc1", "0.5.1"}) {
    auto v = SglangIpcRouteVariantFor(Parsed(text));
    ASSERT_FALSE(v.ok()) << text;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(v.status().message(), AllOf(HasSubstr(absl::StrCat("SGLang ", text)),
                                            HasSubstr(">= 0.5.5"), HasSubstr("tensor route")));
  }
  // A refused pre-release says how it was read.
  EXPECT_THAT(SglangIpcRouteVariantFor(Parsed("0.5.5rc1")).status().message(),
              HasSubstr("SGLang 0.5.5rc1, a pre-release of 0.5.5 (rc1) may predate"));
  // A 0.5.5 server refused the flattened tensor route is served the map-once route.
  auto routed = SglangAdapter::CheckIpcVersion({{"version", "0.5.5"}}, "http://e:1",
                                               BucketFormat::kFlattened, SglangIpcRoute::kIpc);
  EXPECT_TRUE(routed.ok()) << routed.status();
  // The map-once gate is a route's: a pre-release whose documents list the route is served as
  // its release; one whose documents were not read is refused, saying how to override.
  auto documented = SglangAdapter::CheckIpcVersion({{"version", "0.5.5rc1"}}, "http://e:1",
                                                   BucketFormat::kFlattened, SglangIpcRoute::kIpc,
                                                   nullptr, /*route_documented=*/true);
  EXPECT_TRUE(documented.ok()) << documented.status();
  auto undocumented = SglangAdapter::CheckIpcVersion(
      {{"version", "0.5.5rc1"}}, "http://e:1", BucketFormat::kFlattened, SglangIpcRoute::kIpc);
  EXPECT_THAT(undocumented.status().message(),
              HasSubstr("create the group with --option engine_version=0.5.5"));
  // The uint8 reader is a payload format, never probed: a documented pre-release is still
  // refused, and the group's engine_version lets it through.
  auto format = SglangAdapter::CheckIpcVersion({{"version", "0.5.6.dev3"}}, "http://e:1",
                                               BucketFormat::kFlattened, SglangIpcRoute::kTensor,
                                               nullptr, /*route_documented=*/true);
  EXPECT_EQ(format.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(format.status().message(), HasSubstr("--option engine_version=0.5.6"));
  const SglangVersion forced = *ParseEngineVersionOption("sglang", "0.5.6");
  auto through =
      SglangAdapter::CheckIpcVersion({{"version", "0.5.6.dev3"}}, "http://e:1",
                                     BucketFormat::kFlattened, SglangIpcRoute::kTensor, &forced);
  ASSERT_TRUE(through.ok()) << through.status();
  EXPECT_EQ(through->first.text, "0.5.6.dev3, read as 0.5.6 (the group's engine_version)");
  EXPECT_EQ(through->second.name, "ipc uint8-flattened");
}

TEST(SglangIpcRouteTest, TheRoutePicksTheDataPathAndTheOpeningRequestNamesEachRanksGpu) {
  const SglangOptions options(BucketFormat::kFlattened, SglangMemory::kKeep, SglangIpcRoute::kIpc);
  SglangAdapter adapter(EngineEndpoint{"http://e:1", 2, 1}, AdapterTimeouts{}, options,
                        kCudaIpcStreamDataPath);
  EXPECT_TRUE(adapter.Binding(kCudaIpcStreamDataPath) != nullptr);
  EXPECT_FALSE(adapter.Binding(kCudaIpcDataPath) != nullptr);
  SglangAdapter tensor_route(EngineEndpoint{"http://e:1", 2, 1}, AdapterTimeouts{},
                             SglangOptions(BucketFormat::kFlattened), kCudaIpcDataPath);
  EXPECT_TRUE(tensor_route.Binding(kCudaIpcDataPath) != nullptr);
  EXPECT_FALSE(tensor_route.Binding(kCudaIpcStreamDataPath) != nullptr);

  auto request = IpcStreamBindingOf(adapter).value()->StreamRequest(
      UpdateInfo{"u1", "v1"}, {{"aaaa-1", "ipc:///tmp/a.sock"}, {"bbbb-2", "ipc:///tmp/b.sock"}});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->path, "/update_weights_from_ipc");
  // SGLang looks a rank up as "GPU-" + torch's UUID text; the update's one request carries its
  // label and the cache flush, as a last bucket does.
  EXPECT_EQ(
      nlohmann::json::parse(request->json_body),
      (nlohmann::json{{"zmq_handles",
                       {{"GPU-aaaa-1", "ipc:///tmp/a.sock"}, {"GPU-bbbb-2", "ipc:///tmp/b.sock"}}},
                      {"flush_cache", true},
                      {"weight_version", "v1"}}));
  auto same_gpu = IpcStreamBindingOf(adapter).value()->StreamRequest(
      UpdateInfo{"u1", "v1"}, {{"aaaa-1", "ipc:///tmp/a.sock"}, {"aaaa-1", "ipc:///tmp/b.sock"}});
  EXPECT_EQ(same_gpu.status().code(), absl::StatusCode::kInvalidArgument);
  auto short_of_ranks = IpcStreamBindingOf(adapter).value()->StreamRequest(UpdateInfo{"u1", "v1"},
                                                                           {{"aaaa-1", "ipc://a"}});
  EXPECT_FALSE(short_of_ranks.ok());
  // Tensors are viewed at their own offsets: only alignment is checked, not adjacency.
  BucketManifest manifest;
  manifest.tensors = {TensorEntry{"a", DType::kFloat32, {4}, 0, 16},
                      TensorEntry{"b", DType::kBfloat16, {2}, 64, 4}};
  EXPECT_TRUE(adapter.ValidateBucket(manifest).ok());
  manifest.tensors[1].offset = 65;
  EXPECT_EQ(adapter.ValidateBucket(manifest).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SglangVersionTest, CheckIpcVersionNamesTheUrlAndRefusesMissingOrUnreadableVersions) {
  const std::string url = "http://e:1";
  auto ok = SglangAdapter::CheckIpcVersion({{"version", "0.5.6"}}, url, BucketFormat::kFlattened);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->first.text, "0.5.6");
  auto old = SglangAdapter::CheckIpcVersion({{"version", "0.5.5"}}, url, BucketFormat::kFlattened);
  ASSERT_FALSE(old.ok());
  EXPECT_THAT(old.status().message(),
              AllOf(HasSubstr("engine http://e:1: SGLang 0.5.5 "), HasSubstr(">= 0.5.6")));
  for (const nlohmann::json& info :
       {nlohmann::json::object(), nlohmann::json{{"version", 56}},
        nlohmann::json{{"version", "secret-build-text"}}, nlohmann::json::array()}) {
    auto bad = SglangAdapter::CheckIpcVersion(info, url, BucketFormat::kPerTensor);
    ASSERT_FALSE(bad.ok()) << info.dump();
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(bad.status().message(), HasSubstr("http://e:1/get_server_info"));
    // Text wsyncd cannot read is not echoed.
    EXPECT_THAT(std::string(bad.status().message()), Not(HasSubstr("secret-build-text")));
  }
}

// An in-process server answering /get_server_info with a version.
class SglangProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/get_server_info", [this](const SimHttpRequest&, SimHttpResponse& res) {
      std::lock_guard<std::mutex> lock(mu_);
      res.status = 200;
      res.set_content(
          nlohmann::json{
              {"version", version_}, {"tp_size", 1}, {"pp_size", 1}, {"weight_version", "w0"}}
              .dump(),
          "application/json");
    });
    auto port = server_.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    url_ = absl::StrCat("http://127.0.0.1:", *port);
  }
  SglangAdapter Adapter(BucketFormat format, absl::string_view data_path) {
    return SglangAdapter(EngineEndpoint{url_, 1, 1},
                         AdapterTimeouts{absl::Seconds(2), absl::Seconds(2)}, SglangOptions(format),
                         data_path);
  }
  void SetVersion(std::string v) {
    std::lock_guard<std::mutex> lock(mu_);
    version_ = std::move(v);
  }

  std::mutex mu_;
  std::string version_ = "0.5.6";
  SimHttpServer server_;
  std::string url_;
};

TEST_F(SglangProbeTest, ProbePicksTheVariantAndHealthNamesIt) {
  SglangAdapter adapter = Adapter(BucketFormat::kFlattened, kCudaIpcDataPath);
  EXPECT_FALSE(adapter.ipc_variant().has_value());
  ASSERT_TRUE(adapter.Probe().ok());
  ASSERT_TRUE(adapter.ipc_variant().has_value());
  EXPECT_EQ(adapter.ipc_variant()->name, "ipc uint8-flattened");
  EngineHealth health = adapter.Health();
  EXPECT_TRUE(health.healthy);
  EXPECT_EQ(health.engine_version, "0.5.6");
  EXPECT_EQ(health.variant, "ipc uint8-flattened");
  EXPECT_EQ(health.weight_version, "w0");
  EXPECT_TRUE(health.error.empty());
}

TEST_F(SglangProbeTest, AnOldServerIsRefusedAtProbeAndShownUnsupported) {
  SetVersion("0.5.5.post1");
  SglangAdapter adapter = Adapter(BucketFormat::kFlattened, kCudaIpcDataPath);
  absl::Status probed = adapter.Probe();
  EXPECT_EQ(probed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(probed.message(),
              AllOf(HasSubstr(url_), HasSubstr("SGLang 0.5.5.post1, a post release of 0.5.5"),
                    HasSubstr(">= 0.5.6"), HasSubstr("per_tensor")));
  EngineHealth health = adapter.Health();
  EXPECT_TRUE(health.healthy);
  EXPECT_EQ(health.engine_version, "0.5.5.post1");
  EXPECT_EQ(health.variant, "unsupported");
  EXPECT_THAT(health.error, HasSubstr(">= 0.5.6"));

  SglangAdapter per_tensor = Adapter(BucketFormat::kPerTensor, kCudaIpcDataPath);
  ASSERT_TRUE(per_tensor.Probe().ok());
  EXPECT_EQ(per_tensor.Health().variant, "ipc per-tensor");
}

TEST_F(SglangProbeTest, TheBroadcastPathReadsNoVersion) {
  SetVersion("not-a-version");
  SglangAdapter adapter = Adapter(BucketFormat::kFlattened, kBroadcastDataPath);
  EXPECT_TRUE(adapter.Probe().ok());
  EXPECT_FALSE(adapter.ipc_variant().has_value());
  EngineHealth health = adapter.Health();
  EXPECT_EQ(health.engine_version, "not-a-version");
  EXPECT_EQ(health.variant, "nccl flattened_bucket");
}

}  // namespace
}  // namespace wsync
