// Loading NCCL needs no GPU: these run wherever the CUDA seam is built (libnccl.so.2 on the
// loader's path, as the CUDA toolkit installs it).
#include <string>

#include "common/cuda/nccl_library.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync::cuda {
namespace {

using ::testing::HasSubstr;

TEST(NcclLibraries, TheDefaultIsLoadedAtOnceAndServesTheEmptyName) {
  auto libraries = NcclLibraries::Create("libnccl.so.2");
  ASSERT_TRUE(libraries.ok()) << libraries.status();
  const NcclLibrary& nccl = (*libraries)->default_library();
  EXPECT_GE(nccl.version(), 21800) << "wsync needs NCCL >= 2.18";
  EXPECT_EQ(nccl.path(), "libnccl.so.2");
  auto empty = (*libraries)->Get("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, &nccl);
  auto same = (*libraries)->Get("libnccl.so.2");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, &nccl) << "one load per name";
}

TEST(NcclLibraries, AGroupsOwnLibraryIsLoadedOnceAndKept) {
  auto libraries = NcclLibraries::Create("libnccl.so.2");
  ASSERT_TRUE(libraries.ok()) << libraries.status();
  // Another name for a library: loaded under its own name, with its own version read.
  auto other = (*libraries)->Get("libnccl.so");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ((*other)->path(), "libnccl.so");
  EXPECT_EQ((*other)->version(), (*libraries)->default_library().version());
  auto again = (*libraries)->Get("libnccl.so");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *other);
  EXPECT_NE(*other, &(*libraries)->default_library());
  // What the metrics name: each library once, by the name it was asked by, with its version.
  const std::string version = (*libraries)->default_library().version_string();
  EXPECT_EQ((*libraries)->List(), (std::vector<std::pair<std::string, std::string>>{
                                      {"libnccl.so", version}, {"libnccl.so.2", version}}));
}

TEST(NcclLibraries, AMissingOrForeignLibraryIsRefusedByNameAndTriedAgainLater) {
  auto libraries = NcclLibraries::Create("libnccl.so.2");
  ASSERT_TRUE(libraries.ok()) << libraries.status();
  auto missing = (*libraries)->Get("/nonexistent/nvidia/nccl/lib/libnccl.so.2");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("cannot load NCCL from '/nonexistent/nvidia/nccl/lib/libnccl.so.2'"));
  EXPECT_EQ((*libraries)->Get("/nonexistent/nvidia/nccl/lib/libnccl.so.2").status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "not cached: tried again";
  auto foreign = (*libraries)->Get("libc.so.6");
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(foreign.status().message(), HasSubstr("'libc.so.6' lacks NCCL symbols"));
  auto bad_default = NcclLibraries::Create("/nonexistent/libnccl.so.2");
  EXPECT_EQ(bad_default.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace wsync::cuda
