#include "daemon/engines/vllm/vllm_options.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "daemon/config.h"
#include "daemon/core/weight_group.h"
#include "daemon/service/group_spec_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST(Config, VllmBroadcastOptionsNameTheRendezvousAndChunkAndSurviveARecord) {
  const std::string path = ::testing::TempDir() + "/wsyncd-vllm-nccl.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "c", "kind": "vllm", "transport": "broadcast",
       "vllm": {"packed": true, "rendezvous": "unique-id", "packed_chunk_bytes": 65536},
       "engines": [{"url": "http://e:3"}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  const auto* c = dynamic_cast<const VllmOptions*>(config.groups[0].engine_options.get());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->rendezvous(), VllmRendezvous::kUniqueId);
  EXPECT_EQ(c->packed_chunk_bytes(), 65536u);
  auto again = GroupSpecFromJson(GroupSpecToJson(config.groups[0]));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, config.groups[0]);
  v1::GroupSpec proto;
  GroupSpecToProto(config.groups[0], &proto);
  EXPECT_EQ(proto.vllm().rendezvous(), v1::VLLM_RENDEZVOUS_UNIQUE_ID);
  EXPECT_EQ(proto.vllm().packed_chunk_bytes(), 65536u);
  for (const char* bad : {R"("rendezvous": "tcp")", R"("packed_chunk_bytes": 0)",
                          R"("engine_version": "0.17.0rc1")", R"("engine_version": 17)"}) {
    std::ofstream(path) << absl::StrCat(
        R"({"groups": [{"name": "g", "kind": "vllm", "transport": "broadcast", "vllm": {)", bad,
        R"(}, "engines": [{"url": "http://e:1"}]}]})");
    DaemonConfig refused;
    EXPECT_EQ(LoadConfigFile(path, &refused).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Config, AGroupsEngineVersionIsKeptAndTravelsWithItsOptions) {
  const std::string path = ::testing::TempDir() + "/wsyncd-vllm-version.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "n", "kind": "vllm", "transport": "ipc", "vllm": {"engine_version": "0.17.0"},
       "engines": [{"url": "http://e:1", "gpus": ["GPU-0"]}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  const auto* n = dynamic_cast<const VllmOptions*>(config.groups[0].engine_options.get());
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->engine_version(), "0.17.0");
  EXPECT_THAT(n->Describe(), HasSubstr("engine_version=0.17.0"));
  auto again = GroupSpecFromJson(GroupSpecToJson(config.groups[0]));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, config.groups[0]);
  v1::GroupSpec proto;
  GroupSpecToProto(config.groups[0], &proto);
  EXPECT_THAT(proto.engine_options_json(), HasSubstr("\"engine_version\":\"0.17.0\""));
}

TEST(Config, VllmOptionsSitUnderTheirKindWithSafeDefaults) {
  const std::string path = ::testing::TempDir() + "/wsyncd-vllm.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "a", "kind": "vllm", "transport": "ipc",
       "engines": [{"url": "http://e:1", "gpus": ["GPU-0"]}]},
      {"name": "b", "kind": "vllm", "transport": "ipc",
       "vllm": {"packed": true, "pause_mode": "abort", "wake_weights": true,
                "reset_prefix_cache": false},
       "engines": [{"url": "http://e:2", "gpus": ["GPU-0"]}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  const auto* a = dynamic_cast<const VllmOptions*>(config.groups[0].engine_options.get());
  ASSERT_NE(a, nullptr) << "a vllm group carries VllmOptions";
  EXPECT_FALSE(a->packed());
  EXPECT_EQ(a->pause_mode(), VllmPauseMode::kKeep);
  EXPECT_FALSE(a->wake_weights());
  EXPECT_TRUE(a->reset_prefix_cache());
  const auto* b = dynamic_cast<const VllmOptions*>(config.groups[1].engine_options.get());
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->packed());
  EXPECT_EQ(b->pause_mode(), VllmPauseMode::kAbort);
  EXPECT_TRUE(b->wake_weights());
  EXPECT_FALSE(b->reset_prefix_cache());
  EXPECT_EQ(b->Describe(),
            "packed, pause=abort, wake_weights, keep prefix cache, rendezvous=store");
  // Written (a group record) and read back: the same spec.
  auto again = GroupSpecFromJson(GroupSpecToJson(config.groups[1]));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, config.groups[1]);
  DaemonConfig bad;
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "vllm", "vllm": {"pack": true},
      "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown vllm option \"pack\""));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "vllm",
      "vllm": {"pause_mode": "freeze"}, "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown vllm pause mode"));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "vllm", "vllm": {"packed": 1},
      "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("must be true or false"));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "sglang", "vllm": {},
      "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(),
              HasSubstr("groups[0].vllm: group 'g' is of kind sglang, not vllm"));
}

TEST(GroupSpecProto, VllmOptionsTravelInTheirOwnMessageWithZeroAsTheDefault) {
  v1::GroupSpec proto;
  proto.set_name("colo");
  proto.set_kind(v1::ENGINE_KIND_VLLM);
  proto.set_transport(v1::TRANSPORT_IPC);
  proto.add_engines()->set_url("http://e:1");
  auto defaults = GroupSpecFromProto(proto);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->engine_options->Describe(),
            "unpacked, pause=keep, no wake, reset_prefix_cache, rendezvous=store");
  proto.mutable_vllm();  // all zero: the same defaults
  auto zero = GroupSpecFromProto(proto);
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->engine_options->Equals(*defaults->engine_options));
  proto.mutable_vllm()->set_packed(true);
  proto.mutable_vllm()->set_pause_mode(v1::VLLM_PAUSE_MODE_WAIT);
  proto.mutable_vllm()->set_keep_prefix_cache(true);
  auto spec = GroupSpecFromProto(proto);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->engine_options->Describe(),
            "packed, pause=wait, no wake, keep prefix cache, rendezvous=store");
  v1::GroupSpec back;
  GroupSpecToProto(*spec, &back);
  EXPECT_TRUE(back.vllm().packed());
  EXPECT_EQ(back.vllm().pause_mode(), v1::VLLM_PAUSE_MODE_WAIT);
  EXPECT_TRUE(back.vllm().keep_prefix_cache());
  proto.set_kind(v1::ENGINE_KIND_LMDEPLOY);
  EXPECT_THAT(GroupSpecFromProto(proto).status().message(),
              HasSubstr("is of kind lmdeploy but carries vllm options"));
}

}  // namespace
}  // namespace wsync
