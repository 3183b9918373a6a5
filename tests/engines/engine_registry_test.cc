// Engine kinds as registered plug-ins (daemon/engines/engine_kind.h): each kind parses and writes
// its own options, the config file, the admin API and wsyncctl carry them as the kind's JSON, the
// deprecated typed admin fields keep working, and a new kind (the test-only "echo" of
// tests/engines/echo) needs its folder and one registration line, nothing else.

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/host/host_platform.h"
#include "common/status_macros.h"
#include "daemon/config.h"
#include "daemon/core/weight_group.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/service/group_spec_proto.h"
#include "daemon/transport/builtin_transport_kinds.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engines/echo/echo_kind.h"
#include "tests/fakes/fake_transport.h"
#include "tests/transport/loop/loop_kind.h"

namespace wsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

// The fake engines behind the echo kind's adapters.
std::shared_ptr<FakeCluster> EchoCluster() {
  static auto* cluster = new std::shared_ptr<FakeCluster>(std::make_shared<FakeCluster>());
  return *cluster;
}

absl::StatusOr<GroupSpec> SpecFromConfig(const std::string& group_json) {
  DaemonConfig config;
  WSYNC_RETURN_IF_ERROR(
      LoadConfigText(absl::StrCat(R"({"groups": [)", group_json, "]}"), "test.json", &config));
  return config.groups.at(0);
}

TEST(EngineRegistry, TheBuiltInKindsAreRegisteredAndAnUnknownOneIsNamedWithThem) {
  EXPECT_THAT(EngineKinds().Names(), IsSupersetOf({"lmdeploy", "sglang", "vllm"}));
  auto trt = EngineKinds().Find("trt");
  ASSERT_FALSE(trt.ok());
  EXPECT_THAT(std::string(trt.status().message()), HasSubstr("unknown engine kind 'trt' ("));
  EXPECT_THAT(std::string(trt.status().message()), HasSubstr("sglang"));
  // A second kind of a name already taken is refused.
  EngineKinds().Register(MakeEchoEngineKind(EchoCluster())).IgnoreError();
  EXPECT_EQ(EngineKinds().Register(MakeEchoEngineKind(EchoCluster())).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(EngineRegistry, EachKindReadsBackWhatItWrites) {
  for (const char* group : {
           R"({"name": "s", "kind": "sglang", "engines": [{"url": "http://e:1"}],
               "sglang": {"load_format": "per_tensor", "memory": "resume"}})",
           R"({"name": "l", "kind": "lmdeploy", "engines": [{"url": "http://e:1"}],
               "lmdeploy": {"load_format": "per_tensor"}})",
           R"({"name": "v", "kind": "vllm", "engines": [{"url": "http://e:1"}],
               "vllm": {"packed": true, "rendezvous": "unique-id", "pause_mode": "abort",
                        "packed_chunk_bytes": 4096}})"}) {
    auto spec = SpecFromConfig(group);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto json = EngineOptionsToJson(*spec);
    ASSERT_TRUE(json.ok());
    auto back = ParseEngineOptions(spec->kind, *json, spec->name);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE((*back)->Equals(*spec->engine_options)) << json->dump();
    auto defaults = DefaultEngineOptions(spec->kind);
    ASSERT_TRUE(defaults.ok());
    EXPECT_FALSE((*defaults)->Equals(*spec->engine_options)) << spec->kind;
  }
}

TEST(EngineRegistry, AnUnknownOptionIsRefusedByItsKindNamingTheGroupAndTheKey) {
  auto spec = SpecFromConfig(R"({"name": "v", "kind": "vllm", "engines": [{"url": "http://e:1"}],
                                 "vllm": {"pakced": true}})");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), "test.json: groups[0].vllm: unknown vllm option \"pakced\"");
}

TEST(EngineRegistry, AConfigsTopLevelLoadFormatStillWorksForSglang) {
  auto spec = SpecFromConfig(
      R"({"name": "s", "load_format": "per_tensor", "engines": [{"url": "http://e:1"}]})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto json = EngineOptionsToJson(*spec);
  ASSERT_TRUE(json.ok());
  EXPECT_EQ((*json)["load_format"], "per_tensor");
}

// The admin API: kind_name and engine_options_json, and the deprecated enum and typed messages.
class AdminOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto spec = SpecFromConfig(R"({"name": "v", "kind": "vllm", "engines": [{"url": "http://e:1"}],
                                   "vllm": {"packed": true, "rendezvous": "unique-id"}})");
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    GroupSpecToProto(spec_, &both_);
  }
  GroupSpec spec_;
  v1::GroupSpec both_;
};

TEST_F(AdminOptionsTest, WsyncdAnswersWithTheNameTheJsonAndTheDeprecatedForms) {
  EXPECT_EQ(both_.kind_name(), "vllm");
  EXPECT_EQ(both_.kind(), v1::ENGINE_KIND_VLLM);
  EXPECT_THAT(both_.engine_options_json(), HasSubstr("\"rendezvous\":\"unique-id\""));
  EXPECT_TRUE(both_.vllm().packed());
  EXPECT_EQ(both_.vllm().rendezvous(), v1::VLLM_RENDEZVOUS_UNIQUE_ID);
  auto back = GroupSpecFromProto(both_);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->engine_options->Equals(*spec_.engine_options));
}

TEST_F(AdminOptionsTest, TheJsonAloneAndTheDeprecatedFieldsAloneEachGiveTheSameSpec) {
  v1::GroupSpec json_only = both_;
  json_only.clear_kind();
  json_only.clear_vllm();
  auto from_json = GroupSpecFromProto(json_only);
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_EQ(from_json->kind, "vllm");
  EXPECT_TRUE(from_json->engine_options->Equals(*spec_.engine_options));
  // An older client: the enum and the typed message, no kind_name, no JSON.
  v1::GroupSpec old_client = both_;
  old_client.clear_kind_name();
  old_client.clear_engine_options_json();
  auto from_old = GroupSpecFromProto(old_client);
  ASSERT_TRUE(from_old.ok()) << from_old.status();
  EXPECT_EQ(from_old->kind, "vllm");
  EXPECT_TRUE(from_old->engine_options->Equals(*spec_.engine_options));
}

TEST_F(AdminOptionsTest, TheTwoFormsMustAgreeAndTheJsonMustBeAnObjectOfKnownKeys) {
  v1::GroupSpec disagree = both_;
  disagree.mutable_vllm()->set_packed(false);
  auto refused = GroupSpecFromProto(disagree);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("disagree"));
  v1::GroupSpec not_json = both_;
  not_json.clear_vllm();
  not_json.set_engine_options_json("[1]");
  EXPECT_THAT(std::string(GroupSpecFromProto(not_json).status().message()),
              HasSubstr("engine_options_json is not a JSON object"));
  not_json.set_engine_options_json(R"({"load_format": "per_tensor"})");
  EXPECT_EQ(GroupSpecFromProto(not_json).status().message(),
            "group 'v': unknown vllm option \"load_format\"");
  v1::GroupSpec unknown = both_;
  unknown.set_kind_name("trt");
  EXPECT_THAT(std::string(GroupSpecFromProto(unknown).status().message()),
              HasSubstr("unknown engine kind 'trt'"));
}

TEST_F(AdminOptionsTest, TheTransportGoesByNameAndTheDeprecatedEnumStillWorks) {
  EXPECT_EQ(both_.transport_name(), "broadcast");
  EXPECT_EQ(both_.transport(), v1::TRANSPORT_BROADCAST);
  // An older client: the enum alone (each use is logged as deprecated).
  v1::GroupSpec old_client = both_;
  old_client.clear_transport_name();
  old_client.set_transport(v1::TRANSPORT_IPC);
  old_client.mutable_engines(0)->add_gpus("GPU-126c071a-1253-3d49-71ab-17c686b110d5");
  auto from_old = GroupSpecFromProto(old_client);
  ASSERT_TRUE(from_old.ok()) << from_old.status();
  EXPECT_EQ(from_old->transport, "ipc");
  // Neither form: the broadcast, as the enum's unset value always meant.
  v1::GroupSpec neither = both_;
  neither.clear_transport_name();
  neither.clear_transport();
  EXPECT_EQ(GroupSpecFromProto(neither).value().transport, "broadcast");
  // By name, an alias read as its name; the two forms must agree.
  v1::GroupSpec alias = neither;
  alias.set_transport_name("nccl");
  EXPECT_EQ(GroupSpecFromProto(alias).value().transport, "broadcast");
  v1::GroupSpec disagree = old_client;
  disagree.set_transport_name("broadcast");
  EXPECT_THAT(std::string(GroupSpecFromProto(disagree).status().message()), HasSubstr("disagree"));
  v1::GroupSpec unknown = neither;
  unknown.set_transport_name("rdma");
  EXPECT_THAT(std::string(GroupSpecFromProto(unknown).status().message()),
              HasSubstr("unknown transport 'rdma' (broadcast, ipc, relay)"));
}

// A new engine kind: the "echo" folder, and this one registration line in the test's setup.
class EchoKindTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The one line (IgnoreError: an earlier test of this binary may have registered it).
    EngineKinds().Register(MakeEchoEngineKind(EchoCluster())).IgnoreError();
  }
  static std::shared_ptr<FakeCluster> Cluster() { return EchoCluster(); }
};

TEST_F(EchoKindTest, ItsOptionsTravelThroughTheConfigTheAdminApiAndTheRecord) {
  auto spec = SpecFromConfig(R"({"name": "e", "kind": "echo", "engines": [{"url": "http://x:1"}],
                                 "echo": {"greeting": "hi", "ranks_per_engine": 2}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->engine_options->Describe(), "greeting=hi, ranks_per_engine=2");
  // The record and the config file are one schema.
  const nlohmann::json record = GroupSpecToJson(*spec);
  EXPECT_EQ(record["echo"]["greeting"], "hi");
  v1::GroupSpec proto;
  GroupSpecToProto(*spec, &proto);
  EXPECT_EQ(proto.kind_name(), "echo");
  EXPECT_EQ(proto.kind(), v1::ENGINE_KIND_UNSPECIFIED);
  EXPECT_EQ(proto.engine_options_case(), v1::GroupSpec::ENGINE_OPTIONS_NOT_SET);
  auto back = GroupSpecFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->engine_options->Equals(*spec->engine_options));
  // Its own rules: a bad option, a value its Validate refuses, and no weight checker.
  EXPECT_EQ(SpecFromConfig(R"({"name": "e", "kind": "echo", "engines": [{"url": "http://x:1"}],
                              "echo": {"volume": 11}})")
                .status()
                .message(),
            "test.json: groups[0].echo: bad echo option \"volume\"");
  EXPECT_THAT(std::string(SpecFromConfig(
                              R"({"name": "e", "kind": "echo", "engines": [{"url": "http://x:1"}],
                                  "echo": {"ranks_per_engine": 0}})")
                              .status()
                              .message()),
              HasSubstr("at least 1"));
  auto checked = SpecFromConfig(R"({"name": "e", "kind": "echo", "check_weights": true,
                                    "engines": [{"url": "http://x:1"}]})");
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(ValidateGroupSpec(*checked).message(), "group 'e': echo engines keep no checksums");
}

// Makes a group of `spec` with `factories`, forms it and commits one update "u1" to version "v1"
// of one uint8 bucket of `bytes` bytes, each `fill`.
void FormAndCommitOneBucket(const GroupSpec& spec, const GroupFactories& factories, size_t bytes,
                            uint8_t fill) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  auto group = WeightGroup::Create(spec, &platform, GroupOptions{}, factories);
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_TRUE((*group)->Form().ok());
  ASSERT_TRUE((*group)->BeginUpdate(UpdateInfo{"u1", "v1"}).ok());
  auto slot = platform.AllocateSlot(0, 4096);
  ASSERT_TRUE(slot.ok()) << slot.status();
  std::memset((*slot)->data(), fill, bytes);
  BucketManifest manifest;
  manifest.tensors.push_back(
      TensorEntry{"w", DType::kUint8, {static_cast<int64_t>(bytes)}, 0, bytes});
  auto handle =
      (*group)->StartBucket({BucketSource{0, slot->get(), nullptr}}, manifest,
                            BucketContext{"u1", "v1", 0, true}, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::vector<EngineOutcome> answers;
  ASSERT_TRUE((*handle)->WaitAnswered(&answers).ok());
  std::vector<EngineOutcome> finished;
  ASSERT_TRUE(
      (*group)->FinishUpdate(UpdateInfo{"u1", "v1"}, absl::InfiniteFuture(), &finished).ok());
  EXPECT_EQ((*group)->Snapshot().last_version, "v1");
}

TEST_F(EchoKindTest, AGroupOfItsEnginesFormsAndCommitsAnUpdate) {
  auto spec = SpecFromConfig(R"({"name": "e", "kind": "echo",
                                 "engines": [{"url": "http://x:1"}, {"url": "http://y:2"}]})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  // The adapters come from the registry, as wsyncd's own factories make them; the transport is
  // the fake one (the data path is not what this shows).
  GroupFactories factories = FakeGroupFactories(Cluster(), FakeCapabilities());
  factories.adapter = MakeRegisteredAdapter;
  FormAndCommitOneBucket(*spec, factories, 64, 7);
  for (const char* url : {"http://x:1", "http://y:2"}) {
    EXPECT_THAT(Cluster()->Engine(url)->events(),
                ElementsAre("probe", "pause", "begin u1 v1", "finish u1 v1"))
        << url;
    ASSERT_EQ(Cluster()->Engine(url)->buckets().size(), 1u);
    EXPECT_EQ(Cluster()->Engine(url)->buckets()[0].payloads[0], std::string(64, '\7'));
  }
}

// A new transport: the "loop" folder, this one registration line, and the echo kind's one binding
// file (tests/engines/echo/echo_loop_binding.h).
class LoopTransportTest : public EchoKindTest {
 protected:
  static void SetUpTestSuite() {
    EchoKindTest::SetUpTestSuite();
    TransportKinds().Register(MakeLoopTransportKind(EchoCluster())).IgnoreError();
  }
};

TEST_F(LoopTransportTest, AGroupOnTheLoopFormsThroughItsBindingAndCommits) {
  auto spec = SpecFromConfig(R"({"name": "l", "kind": "echo", "transport": "loop",
                                 "engines": [{"url": "http://lx:1"}],
                                 "echo": {"greeting": "hi"}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->transport, "loop");
  // wsyncd's own factories: the adapter and the transport both come from the registries.
  GroupFactories factories;
  factories.adapter = MakeRegisteredAdapter;
  factories.transport = MakeRegisteredTransport;
  FormAndCommitOneBucket(*spec, factories, 32, 9);
  EXPECT_THAT(Cluster()->Engine("http://lx:1")->events(),
              ElementsAre("loop hello hi", "probe", "pause", "begin u1 v1", "finish u1 v1"));
  EXPECT_EQ(Cluster()->Engine("http://lx:1")->buckets()[0].payloads[0], std::string(32, '\11'));
  // An engine kind with no binding of the loop's path is refused naming the path; an unknown
  // transport names those registered.
  auto sglang = SpecFromConfig(R"({"name": "s", "transport": "loop",
                                   "engines": [{"url": "http://lx:2"}]})");
  ASSERT_TRUE(sglang.ok()) << sglang.status();
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  auto refused = WeightGroup::Create(*sglang, &platform, GroupOptions{}, factories);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("cannot receive over the loop data path that the loop transport needs"));
  const std::string unknown(SpecFromConfig(R"({"name": "s", "transport": "lop",
                                                "engines": [{"url": "http://lx:2"}]})")
                                .status()
                                .message());
  EXPECT_THAT(unknown, HasSubstr("unknown transport 'lop' (broadcast, "));
  EXPECT_THAT(unknown, HasSubstr(", loop, relay)"));
}

}  // namespace
}  // namespace wsync
