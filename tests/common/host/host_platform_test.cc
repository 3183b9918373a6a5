#include "common/host/host_platform.h"

#include <cstring>

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

namespace wsync {
namespace {

TEST(HostPlatform, AResidentBucketKeepsASlotsBytesAndPutsThemBack) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  auto from = platform.AllocateSlot(0, 4096);
  auto to = platform.AllocateSlot(0, 4096);
  ASSERT_TRUE(from.ok() && to.ok());
  for (int i = 0; i < 4096; ++i) static_cast<char*>((*from)->data())[i] = static_cast<char>(i * 7);
  for (ResidentMedium medium : {ResidentMedium::kHost, ResidentMedium::kGpu}) {
    auto resident = platform.AllocateResident(0, medium, 3000);
    ASSERT_TRUE(resident.ok()) << resident.status();
    EXPECT_EQ((*resident)->medium(), medium);
    ASSERT_TRUE((*resident)->CopyFromSlot(**from).ok());
    std::memset((*to)->data(), 0, 4096);
    ASSERT_TRUE((*resident)->CopyToSlot(**to).ok());
    EXPECT_EQ(std::memcmp((*to)->data(), (*from)->data(), 3000), 0);
    EXPECT_EQ(static_cast<char*>((*to)->data())[3000], 0) << "only its own bytes are written";
  }
  auto small = platform.AllocateSlot(0, 1024);
  auto resident = platform.AllocateResident(0, ResidentMedium::kHost, 3000);
  ASSERT_TRUE(small.ok() && resident.ok());
  EXPECT_EQ((*resident)->CopyToSlot(**small).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(platform.AllocateResident(99, ResidentMedium::kHost, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace wsync
