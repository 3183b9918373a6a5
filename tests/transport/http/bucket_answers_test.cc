// The one reading of a bucket's failures every transport uses: causes in the order they happened,
// notes after them, the first cause's code.
#include "daemon/transport/http/bucket_answers.h"

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

TEST(BucketFailures, CausesComeInTheOrderTheyHappenedThenTheNotes) {
  const absl::Time t0 = absl::Now();
  BucketFailures failures;
  EXPECT_TRUE(failures.empty());
  EXPECT_TRUE(failures.Combined(absl::UnknownError("")).ok());
  failures.Add(t0 + absl::Seconds(2), absl::DeadlineExceededError("late"), "engine b: late");
  failures.Note("store: 1 of 2 ranks connected");
  failures.Add(t0, absl::UnavailableError("gone"), "engine a: gone");
  failures.Add(t0, absl::InternalError("also"), "engine c: also");
  EXPECT_TRUE(failures.has_causes());
  const absl::Status s = failures.Combined(absl::UnknownError(""));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << "the first failure caused the rest";
  EXPECT_EQ(s.message(),
            "engine a: gone; engine c: also; engine b: late; store: 1 of 2 ranks connected");
}

TEST(BucketFailures, NotesAloneTakeTheCodeTheCallerGives) {
  BucketFailures failures;
  failures.Note("not sent to http://e:1");
  EXPECT_FALSE(failures.has_causes());
  const absl::Status s = failures.Combined(absl::CancelledError(""));
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s.message(), "not sent to http://e:1");
}

TEST(FailureLatch, OnceTrippedItStaysTripped) {
  FailureLatch latch;
  EXPECT_FALSE(latch.tripped());
  latch.Trip();
  latch.Trip();
  EXPECT_TRUE(latch.tripped());
}

}  // namespace
}  // namespace wsync
