// RelayChannel: requests matched to their replies by id, every wait bounded, and every waiter
// told at once when the subscription's stream ends.
#include "daemon/relay/relay_channel.h"

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

struct Written {
  std::vector<v1::RelayDown> messages;
  bool broken = false;
};

std::shared_ptr<RelayChannel> MakeChannel(Written* written) {
  RelaySubscription s;
  s.node = "rollout-1";
  return std::make_shared<RelayChannel>(
      "s1", s,
      [written](const v1::RelayDown& down) {
        if (written->broken) return false;
        written->messages.push_back(down);
        return true;
      },
      nullptr);
}

v1::RelayReply Reply(uint64_t id, int code = 0, const std::string& message = "") {
  v1::RelayReply r;
  r.set_id(id);
  r.set_code(code);
  r.set_message(message);
  return r;
}

TEST(RelayChannel, RepliesFindTheirRequestsInAnyOrder) {
  Written written;
  auto channel = MakeChannel(&written);
  v1::RelayRequest begin;
  begin.mutable_begin()->set_version("v1");
  const uint64_t a = channel->Send(begin).value();
  const uint64_t b = channel->Send(begin).value();
  EXPECT_NE(a, b);
  ASSERT_EQ(written.messages.size(), 2u);
  EXPECT_EQ(written.messages[0].request().id(), a);
  EXPECT_EQ(written.messages[1].request().begin().version(), "v1");
  ASSERT_TRUE(channel->Deliver(Reply(b, 5, "no such group")).ok());
  ASSERT_TRUE(channel->Deliver(Reply(a)).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  EXPECT_EQ(channel->Await(a, deadline)->code(), 0);
  absl::StatusOr<v1::RelayReply> second = channel->Await(b, deadline);
  ASSERT_TRUE(second.ok());
  absl::Status status = ReplyStatus(*second, "node rollout-1");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "node rollout-1: no such group");
}

TEST(RelayChannel, AReplyNobodyAskedForIsAProtocolErrorButALateOneIsNot) {
  Written written;
  auto channel = MakeChannel(&written);
  EXPECT_EQ(channel->Deliver(Reply(7)).code(), absl::StatusCode::kInvalidArgument);
  const uint64_t id = channel->Send(v1::RelayRequest()).value();
  absl::StatusOr<v1::RelayReply> late = channel->Await(id, absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(late.status().message(), HasSubstr("node rollout-1 (s1) did not answer"));
  EXPECT_TRUE(channel->Deliver(Reply(id)).ok()) << "the answer came after the wait gave up";
  const uint64_t again = channel->Send(v1::RelayRequest()).value();
  ASSERT_TRUE(channel->Deliver(Reply(again)).ok());
  EXPECT_EQ(channel->Deliver(Reply(again)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RelayChannel, TheStreamsEndWakesEveryWaiterAndRefusesLaterSends) {
  Written written;
  auto channel = MakeChannel(&written);
  const uint64_t id = channel->Send(v1::RelayRequest()).value();
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    channel->Close(absl::OkStatus());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::RelayReply> reply = channel->Await(id, start + absl::Seconds(30));
  closer.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(reply.status().message(), HasSubstr("subscription of node rollout-1 (s1) ended"));
  EXPECT_EQ(channel->Send(v1::RelayRequest()).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(written.messages.size(), 1u) << "nothing is written after the stream ended";
  EXPECT_FALSE(channel->open().ok());
}

TEST(RelayChannel, AWriteThatFailsClosesTheChannel) {
  Written written;
  written.broken = true;
  auto channel = MakeChannel(&written);
  absl::StatusOr<uint64_t> sent = channel->Send(v1::RelayRequest());
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(sent.status().message(), HasSubstr("broke"));
  EXPECT_FALSE(channel->open().ok());
}

TEST(ReplyStatus, APeersCodeOutOfRangeIsUnknownAndItsTextIsSanitized) {
  absl::Status s = ReplyStatus(Reply(1, 99, "bad\nline"), "node x");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("\n")));
}

}  // namespace
}  // namespace wsync
