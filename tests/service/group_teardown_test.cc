// How rank 0's side of a broadcast group goes when the group is destroyed. Engines whose destroy
// route tears their communicator down with rank 0 (SGLang: torch finalizes it with its peers) let
// rank 0 finalize too; vLLM has no such route, so a finalize would wait for peers that never take
// part (on GPUs, NCCL's finalize waited until the call's deadline for each group destroyed):
// rank 0 aborts its side alone.

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/process_harness.h"
#include "tests/service/service_fixture.h"

namespace wsync {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class GroupTeardownTest : public ServiceFixture {
 protected:
  grpc::Status Destroy(const std::string& name) {
    v1::DestroyGroupRequest req;
    req.set_name(name);
    v1::DestroyGroupResponse resp;
    grpc::ClientContext ctx;
    return client_->admin()->DestroyGroup(&ctx, req, &resp);
  }
};

TEST_F(GroupTeardownTest, AnSglangGroupIsFinalizedWithItsEnginesNotAborted) {
  CreatePolicyGroup();
  ASSERT_TRUE(Destroy("policy").ok());
  EXPECT_THAT(broadcasts_.aborts(), IsEmpty());
}

TEST_F(GroupTeardownTest, AVllmGroupAbortsRankZerosSideSinceItsEnginesKeepTheirs) {
  // vLLM's simulator (its NCCL backend) on host memory, one worker.
  const int port = FreePort();
  ChildProcess vllm({"/usr/bin/python3", WSYNC_VLLM_ENGINE, "--memory", "host", "--backend", "nccl",
                     "--gpus", "0", "--port", absl::StrCat(port), "--version", "0.30.0"},
                    absl::StrCat(::testing::TempDir(), "/vllm-engine-", ::getpid(), ".log"));
  ASSERT_TRUE(WaitForHttp(port, absl::Seconds(30))) << vllm.Log();
  v1::CreateGroupRequest req;
  v1::GroupSpec* spec = req.mutable_spec();
  spec->set_name("vllm");
  spec->set_kind(v1::ENGINE_KIND_VLLM);
  auto* engine = spec->add_engines();
  engine->set_url(absl::StrCat("http://127.0.0.1:", port));
  engine->set_ranks(1);
  v1::GroupInfo info;
  grpc::ClientContext ctx;
  grpc::Status created = client_->admin()->CreateGroup(&ctx, req, &info);
  ASSERT_TRUE(created.ok()) << created.error_message();
  ASSERT_EQ(info.state(), v1::GROUP_STATE_READY);
  ASSERT_TRUE(Destroy("vllm").ok());
  EXPECT_THAT(broadcasts_.aborts(), ElementsAre("the group is disbanded"));
}

}  // namespace
}  // namespace wsync
