#include "daemon/engines/lmdeploy/lmdeploy_options.h"

#include <fstream>

#include "daemon/config.h"
#include "daemon/core/weight_group.h"
#include "daemon/service/group_spec_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST(Config, LmdeployOptionsSitUnderTheirKindInTheEnginesOwnWords) {
  const std::string path = ::testing::TempDir() + "/wsyncd-lmdeploy.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "a", "kind": "lmdeploy", "transport": "ipc",
       "engines": [{"url": "http://e:1", "gpus": ["GPU-0"]}]},
      {"name": "b", "kind": "lmdeploy", "transport": "ipc", "lmdeploy": {"load_format": "null"},
       "engines": [{"url": "http://e:2", "gpus": ["GPU-0"]}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  for (const auto& [group, format] :
       {std::pair{0, BucketFormat::kFlattened}, std::pair{1, BucketFormat::kPerTensor}}) {
    const auto* options =
        dynamic_cast<const LmdeployOptions*>(config.groups[group].engine_options.get());
    ASSERT_NE(options, nullptr) << "an lmdeploy group carries LmdeployOptions";
    EXPECT_EQ(options->load_format(), format);
  }
  EXPECT_EQ(config.groups[1].engine_options->Describe(), "load_format=null");
  // Written (a group record) and read back: the same spec, in LMDeploy's words.
  const nlohmann::json written = GroupSpecToJson(config.groups[1]);
  EXPECT_EQ(written["lmdeploy"]["load_format"], "null");
  auto again = GroupSpecFromJson(written);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, config.groups[1]);
  DaemonConfig bad;
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "lmdeploy",
      "load_format": "null", "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(),
              HasSubstr("groups[0].load_format: goes under \"lmdeploy\""));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "lmdeploy",
      "lmdeploy": {"sleep": 2}, "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown lmdeploy option \"sleep\""));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "lmdeploy",
      "sglang": {}, "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(),
              HasSubstr("groups[0].sglang: group 'g' is of kind lmdeploy, not sglang"));
}

TEST(GroupSpecProto, LmdeployOptionsTravelInTheirOwnMessage) {
  v1::GroupSpec proto;
  proto.set_name("colo");
  proto.set_kind(v1::ENGINE_KIND_LMDEPLOY);
  proto.set_transport(v1::TRANSPORT_IPC);
  proto.add_engines()->set_url("http://e:1");
  auto defaults = GroupSpecFromProto(proto);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->engine_options->Describe(), "load_format=flattened_bucket");
  proto.mutable_lmdeploy()->set_load_format(v1::LMDEPLOY_LOAD_FORMAT_PER_TENSOR);
  auto spec = GroupSpecFromProto(proto);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->engine_options->Describe(), "load_format=null");
  v1::GroupSpec back;
  GroupSpecToProto(*spec, &back);
  EXPECT_EQ(back.lmdeploy().load_format(), v1::LMDEPLOY_LOAD_FORMAT_PER_TENSOR);
  EXPECT_FALSE(back.has_sglang());
  // Options of another kind are refused, naming both.
  proto.set_kind(v1::ENGINE_KIND_SGLANG);
  EXPECT_THAT(GroupSpecFromProto(proto).status().message(),
              HasSubstr("is of kind sglang but carries lmdeploy options"));
}

}  // namespace
}  // namespace wsync
