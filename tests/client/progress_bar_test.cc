#include "client/cpp/progress_bar.h"

#include "gtest/gtest.h"

namespace wsync {
namespace {

TEST(ProgressBar, NamesBucketsBytesAndRate) {
  EXPECT_EQ(ProgressBar(3, 4, 3ull << 30, 4ull << 30, 2.5, 8),
            "[######..] bucket 3/4  3.00/4.00 GiB  2.50 GiB/s");
  EXPECT_EQ(ProgressBar(4, 4, 4ull << 30, 4ull << 30, 1.0, 4),
            "[####] bucket 4/4  4.00/4.00 GiB  1.00 GiB/s");
}

TEST(ProgressBar, APlanNotKnownYetShowsAsAQuestionMark) {
  EXPECT_EQ(ProgressBar(2, 0, 1ull << 29, 0, 0.5, 4), "[....] bucket 2/?  0.50/? GiB  0.50 GiB/s");
  // A stream still being fed: its bytes so far are no total, so the bar is not full.
  EXPECT_EQ(ProgressBar(3, 0, 3ull << 30, 3ull << 30, 1.0, 4),
            "[....] bucket 3/?  3.00/? GiB  1.00 GiB/s");
}

TEST(ProgressBar, FillsByBucketsOfThePlan) {
  // One large bucket of four done: a quarter, whatever its bytes.
  EXPECT_EQ(ProgressBar(1, 4, 3ull << 30, 4ull << 30, 1.0, 8),
            "[##......] bucket 1/4  3.00/4.00 GiB  1.00 GiB/s");
}

}  // namespace
}  // namespace wsync
