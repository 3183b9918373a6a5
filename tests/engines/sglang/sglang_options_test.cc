#include <fstream>

#include "daemon/config.h"
#include "daemon/core/weight_group.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "daemon/service/group_spec_proto.h"
#include "daemon/transport/ipc/ipc_binding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/group_spec_round_trip.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST(Config, SglangOptionsSitUnderTheirKindAndUnknownKeysAreRefused) {
  const std::string path = ::testing::TempDir() + "/wsyncd-options.json";
  std::ofstream(path) << R"({"groups": [{"name": "g", "sglang": {"load_format": "per_tensor"},
      "engines": [{"url": "http://e:1"}]}]})";
  DaemonConfig nested;
  ASSERT_TRUE(LoadConfigFile(path, &nested).ok());
  EXPECT_EQ(LoadFormat(nested.groups[0]), BucketFormat::kPerTensor);
  std::ofstream(path) << R"({"groups": [{"name": "g", "load_fromat": "per_tensor",
      "engines": [{"url": "http://e:1"}]}]})";
  DaemonConfig bad;
  EXPECT_THAT(LoadConfigFile(path, &bad).message(),
              HasSubstr("groups[0].load_fromat: unknown key; did you mean \"load_format\"?"));
  std::ofstream(path) << R"({"groups": [{"name": "g", "sglang": {"format": "per_tensor"},
      "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown sglang option"));
  std::ofstream(path) << R"({"groups": [{"name": "g", "load_format": "per_tensor",
      "sglang": {"load_format": "flattened_bucket"}, "engines": [{"url": "http://e:1"}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("given twice"));
}

TEST(Config, SglangMemoryDefaultsToKeepAndResumeSurvivesEveryPath) {
  const std::string path = ::testing::TempDir() + "/wsyncd-memory.json";
  std::ofstream(path) << R"({"groups": [
      {"name": "a", "transport": "ipc", "engines": [{"url": "http://e:1", "gpus": ["GPU-0"]}]},
      {"name": "b", "transport": "ipc", "sglang": {"memory": "resume"},
       "engines": [{"url": "http://e:2", "gpus": ["GPU-0"]}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  const auto memory = [](const GroupSpec& spec) {
    return dynamic_cast<const SglangOptions&>(*spec.engine_options).memory();
  };
  EXPECT_EQ(memory(config.groups[0]), SglangMemory::kKeep) << "the safe default";
  EXPECT_EQ(memory(config.groups[1]), SglangMemory::kResume);
  // The admin API and the state directory's records carry it too.
  v1::GroupSpec proto;
  ExpectSurvivesProtoAndJson(config.groups[1], &proto);
  EXPECT_EQ(proto.sglang().memory(), v1::SGLANG_MEMORY_RESUME);
  std::ofstream(path) << R"({"groups": [{"name": "g", "sglang": {"memory": "sometimes"},
      "engines": [{"url": "http://e:1"}]}]})";
  DaemonConfig bad;
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("\"keep\" or \"resume\""));
  std::ofstream(path) << R"({"groups": [{"name": "g", "kind": "lmdeploy", "transport": "ipc",
      "lmdeploy": {"memory": "resume"}, "engines": [{"url": "http://e:1", "gpus": ["GPU-0"]}]}]})";
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("unknown lmdeploy option"));
}

TEST(Config, SglangIpcRouteDefaultsToTensorAndIpcSurvivesEveryPath) {
  const std::string path = ::testing::TempDir() + "/wsyncd-route.json";
  std::ofstream(path) << R"({"ipc_socket_dir": "/run/wsync", "groups": [
      {"name": "a", "transport": "ipc", "engines": [{"url": "http://e:1", "gpus": ["GPU-0"]}]},
      {"name": "b", "transport": "ipc", "sglang": {"ipc_route": "ipc"},
       "engines": [{"url": "http://e:2", "gpus": ["GPU-0"]}]}]})";
  DaemonConfig config;
  ASSERT_TRUE(LoadConfigFile(path, &config).ok());
  EXPECT_EQ(config.daemon.group.transport.socket_dir, "/run/wsync");
  const auto route = [](const GroupSpec& spec) {
    return dynamic_cast<const SglangOptions&>(*spec.engine_options).ipc_route();
  };
  EXPECT_EQ(route(config.groups[0]), SglangIpcRoute::kTensor) << "the default";
  EXPECT_EQ(route(config.groups[1]), SglangIpcRoute::kIpc);
  v1::GroupSpec proto;
  ExpectSurvivesProtoAndJson(config.groups[1], &proto);
  EXPECT_EQ(proto.sglang().ipc_route(), v1::SGLANG_IPC_ROUTE_IPC);
  EXPECT_FALSE(config.groups[0].engine_options->Equals(*config.groups[1].engine_options));
  std::ofstream(path) << R"({"groups": [{"name": "g", "sglang": {"ipc_route": "zmq"},
      "engines": [{"url": "http://e:1"}]}]})";
  DaemonConfig bad;
  EXPECT_THAT(LoadConfigFile(path, &bad).message(), HasSubstr("\"tensor\" or \"ipc\""));
  proto.mutable_sglang()->set_ipc_route(static_cast<v1::SglangIpcRoute>(7));
  EXPECT_EQ(GroupSpecFromProto(proto).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace wsync
