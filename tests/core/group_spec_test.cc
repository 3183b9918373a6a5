#include "daemon/core/transport_kind.h"
#include "daemon/core/weight_group.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/engines/sglang/sglang_adapter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST(GroupSpec, ValidationNamesTheProblem) {
  GroupSpec ok;
  ok.name = "policy";
  ok.engines = {{"http://a:1", 2}};
  ok.kind = "sglang";
  ok.transport = "broadcast";
  ok.engine_options = std::make_shared<const SglangOptions>();
  EXPECT_TRUE(ValidateGroupSpec(ok).ok());
  // Ranks that add up past 2^32 do not wrap around to a small world.
  GroupSpec wrapping = ok;
  wrapping.engines = {{"http://a:1", 1u << 31}, {"http://b:1", 1u << 31}};
  EXPECT_THAT(ValidateGroupSpec(wrapping).message(), HasSubstr("4294967297 ranks"));
  GroupSpec bad_name = ok;
  bad_name.name = "a/b";
  EXPECT_THAT(ValidateGroupSpec(bad_name).message(), HasSubstr("may only contain"));
  GroupSpec no_engines = ok;
  no_engines.engines.clear();
  EXPECT_THAT(ValidateGroupSpec(no_engines).message(), HasSubstr("names no engine"));
  GroupSpec bad_url = ok;
  bad_url.engines[0].url = "a:1";
  EXPECT_THAT(ValidateGroupSpec(bad_url).message(), HasSubstr("must start with http://"));
  // Every kind has default options now; each is made where its options are made.
  auto vllm_defaults = DefaultEngineOptions("vllm");
  ASSERT_TRUE(vllm_defaults.ok()) << vllm_defaults.status();
  EXPECT_EQ((*vllm_defaults)->kind(), "vllm");
  GroupSpec vllm = ok;
  vllm.kind = "vllm";
  EXPECT_THAT(ValidateGroupSpec(vllm).message(), HasSubstr("carries sglang options"));
  GroupSpec no_options = ok;
  no_options.engine_options = nullptr;
  EXPECT_THAT(ValidateGroupSpec(no_options).message(), HasSubstr("carries no sglang options"));
  GroupSpec huge = ok;
  huge.engines[0].ranks = 200;
  EXPECT_THAT(ValidateGroupSpec(huge).message(), HasSubstr("above 128"));
}

TEST(GroupSpec, TheIpcTransportNeedsEachRanksGpuByUuid) {
  GroupSpec ipc;
  ipc.name = "colo";
  ipc.transport = "ipc";
  ipc.engines = {
      {"http://a:1",
       2,
       {"GPU-126C071A-1253-3d49-71ab-17c686b110d5", "226c071a-1253-3d49-71ab-17c686b110d5"}}};
  ipc.kind = "sglang";
  ipc.engine_options = std::make_shared<const SglangOptions>();
  EXPECT_TRUE(ValidateGroupSpec(ipc).ok()) << ValidateGroupSpec(ipc);
  GroupSpec missing = ipc;
  missing.engines[0].gpus.pop_back();
  EXPECT_THAT(ValidateGroupSpec(missing).message(),
              HasSubstr("has 2 rank(s) but 1 GPU UUID(s); the ipc transport needs"));
  GroupSpec not_uuid = ipc;
  not_uuid.engines[0].gpus[1] = "0";
  EXPECT_THAT(ValidateGroupSpec(not_uuid).message(), HasSubstr("'0' is not a GPU UUID"));
  // The broadcast takes no GPUs, but any it is given must still be one per rank.
  GroupSpec broadcast = ipc;
  broadcast.transport = "broadcast";
  EXPECT_TRUE(ValidateGroupSpec(broadcast).ok());
  broadcast.engines[0].gpus.clear();
  EXPECT_TRUE(ValidateGroupSpec(broadcast).ok());
  EXPECT_EQ(TransportKinds().Find("ipc").value()->name(), "ipc");
  EXPECT_EQ(TransportKinds().Find("nccl").value()->name(), "broadcast");
  EXPECT_THAT(TransportKinds().Find("rdma").status().message(),
              HasSubstr("(broadcast, ipc, relay)"));
}

}  // namespace
}  // namespace wsync
