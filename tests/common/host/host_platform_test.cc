#include "common/host/host_platform.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST(HostPlatform, AGroupsNcclLibraryIsNamedAsNotLoadedInHostMode) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  auto plain = platform.CreateRootCommunicator(0, 2, "");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_THAT((*plain)->Describe(), ::testing::Not(::testing::HasSubstr("NCCL")));
  auto named = platform.CreateRootCommunicator(0, 2, "/opt/nccl/libnccl.so.2");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_THAT((*named)->Describe(),
              ::testing::HasSubstr("the group's NCCL /opt/nccl/libnccl.so.2 is not loaded in host "
                                   "mode"));
}

}  // namespace
}  // namespace wsync
