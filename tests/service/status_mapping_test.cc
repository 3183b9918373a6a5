#include "daemon/service/status_mapping.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

TEST(StatusMapping, KeepsCodeAndMessageBothWays) {
  for (auto code : {absl::StatusCode::kInvalidArgument, absl::StatusCode::kFailedPrecondition,
                    absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kUnavailable,
                    absl::StatusCode::kDataLoss, absl::StatusCode::kNotFound}) {
    absl::Status s(code, "engine http://e:1 answered 500");
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), static_cast<int>(code));
    EXPECT_EQ(g.error_message(), "engine http://e:1 answered 500");
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace wsync
