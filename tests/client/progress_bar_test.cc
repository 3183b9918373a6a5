#include "client/cpp/progress_bar.h"

#include "gtest/gtest.h"

namespace wsync {
namespace {

TEST(ProgressBar, FillsByBytesAndNamesBucketsBytesAndRate) {
  EXPECT_EQ(ProgressBar(3, 4, 3ull << 30, 4ull << 30, 2.5, 8),
            "[######..] bucket 3/4  3.00/4.00 GiB  2.50 GiB/s");
  EXPECT_EQ(ProgressBar(4, 4, 4ull << 30, 4ull << 30, 1.0, 4),
            "[####] bucket 4/4  4.00/4.00 GiB  1.00 GiB/s");
}

TEST(ProgressBar, APlanNotKnownYetShowsAsAQuestionMark) {
  EXPECT_EQ(ProgressBar(2, 0, 1ull << 29, 0, 0.5, 4), "[....] bucket 2/?  0.50/? GiB  0.50 GiB/s");
}

}  // namespace
}  // namespace wsync
