// RelayChannel: requests matched to their replies by id, every wait bounded, and every waiter
// told at once when the subscription's stream ends.
#include "daemon/relay/relay_channel.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

// What the channel's writer thread wrote, and how often it cancelled the stream.
struct Written {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<v1::RelayDown> messages;
  bool broken = false;
  int cancels = 0;

  // Waits (up to 10 s) until `n` messages were written; returns them.
  std::vector<v1::RelayDown> WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return messages.size() >= n; });
    return messages;
  }
};

std::shared_ptr<RelayChannel> MakeChannel(Written* written) {
  RelaySubscription s;
  s.node = "rollout-1";
  return std::make_shared<RelayChannel>(
      "s1", s,
      [written](const v1::RelayDown& down) {
        std::lock_guard<std::mutex> lock(written->mu);
        if (written->broken) return false;
        written->messages.push_back(down);
        written->cv.notify_all();
        return true;
      },
      [written] {
        std::lock_guard<std::mutex> lock(written->mu);
        ++written->cancels;
      });
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
  const std::vector<v1::RelayDown> messages = written.WaitFor(2);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0].request().id(), a);
  EXPECT_EQ(messages[1].request().begin().version(), "v1");
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
  const uint64_t forgotten = channel->Send(v1::RelayRequest()).value();
  channel->Forget(forgotten);
  EXPECT_TRUE(channel->Deliver(Reply(forgotten)).ok()) << "a reply no one waits for is dropped";
  const uint64_t again = channel->Send(v1::RelayRequest()).value();
  ASSERT_TRUE(channel->Deliver(Reply(again)).ok());
  EXPECT_EQ(channel->Deliver(Reply(again)).code(), absl::StatusCode::kInvalidArgument);
}

// A downstream that does not answer in time is of no more use: its subscription is cancelled,
// and it subscribes again afresh.
TEST(RelayChannel, ARequestNotAnsweredInTimeCancelsTheSubscription) {
  Written written;
  auto channel = MakeChannel(&written);
  const uint64_t id = channel->Send(v1::RelayRequest()).value();
  absl::StatusOr<v1::RelayReply> late = channel->Await(id, absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(late.status().message(), HasSubstr("node rollout-1 (s1) did not answer"));
  EXPECT_FALSE(channel->open().ok());
  {
    std::lock_guard<std::mutex> lock(written.mu);
    EXPECT_EQ(written.cancels, 1);
  }
  EXPECT_TRUE(channel->Deliver(Reply(id)).ok()) << "the answer came after the wait gave up";
  EXPECT_EQ(channel->Send(v1::RelayRequest()).status().code(), absl::StatusCode::kUnavailable);
  channel->Shutdown();
  EXPECT_EQ(channel->Send(v1::RelayRequest()).status().code(), absl::StatusCode::kUnavailable);
}

// A commit may take long, but only while the downstream keeps saying it works on it: progress
// holds the wait open past its silence, and silence ends it well before the deadline.
TEST(RelayChannel, ProgressKeepsAWaitOpenAndSilenceEndsItBeforeTheDeadline) {
  Written written;
  auto channel = MakeChannel(&written);
  const uint64_t id = channel->Send(v1::RelayRequest()).value();
  std::atomic<bool> stop{false};
  std::thread progress([&] {
    for (int i = 0; i < 30 && !stop; ++i) {
      absl::SleepFor(absl::Milliseconds(20));
      EXPECT_TRUE(channel->Progress(id).ok());
    }
    EXPECT_TRUE(channel->Deliver(Reply(id)).ok());
  });
  const absl::Time t0 = absl::Now();
  // 30 progress messages 20 ms apart outlast a 300 ms silence twice over: the reply still
  // counts.
  absl::StatusOr<v1::RelayReply> answered =
      channel->Await(id, absl::Now() + absl::Seconds(10), absl::Milliseconds(300));
  stop = true;
  progress.join();
  ASSERT_TRUE(answered.ok()) << answered.status();
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(590));

  const uint64_t quiet = channel->Send(v1::RelayRequest()).value();
  const absl::Time t1 = absl::Now();
  absl::StatusOr<v1::RelayReply> dropped =
      channel->Await(quiet, absl::Now() + absl::Seconds(10), absl::Milliseconds(100));
  EXPECT_EQ(dropped.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(dropped.status().message(),
              HasSubstr("node rollout-1 (s1) said nothing of relay request 2 for 100ms"));
  EXPECT_LT(absl::Now() - t1, absl::Seconds(5)) << "silence must end the wait, not the deadline";
  EXPECT_FALSE(channel->open().ok());
  // Progress on a request given up on is late, not wrong; on one never sent it is wrong.
  EXPECT_TRUE(channel->Progress(quiet).ok());
  EXPECT_EQ(channel->Progress(99).code(), absl::StatusCode::kInvalidArgument);
  channel->Shutdown();
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
  channel->Shutdown();
  std::lock_guard<std::mutex> lock(written.mu);
  EXPECT_LE(written.messages.size(), 1u) << "nothing is written after the stream ended";
  EXPECT_FALSE(channel->open().ok());
}

TEST(RelayChannel, AWriteThatFailsClosesTheChannelAndWakesItsWaiter) {
  Written written;
  written.broken = true;
  auto channel = MakeChannel(&written);
  const uint64_t id = channel->Send(v1::RelayRequest()).value();
  absl::StatusOr<v1::RelayReply> reply = channel->Await(id, absl::Now() + absl::Seconds(30));
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(reply.status().message(), HasSubstr("broke"));
  EXPECT_FALSE(channel->open().ok());
}

// A downstream that reads nothing fills its queue: the subscription is cut off, no sender waits.
TEST(RelayChannel, ADownstreamThatReadsNothingIsCutOffNotWaitedFor) {
  std::mutex gate;
  gate.lock();  // the writer blocks in its first write, as a stream under flow control does
  std::atomic<int> cancels{0};
  RelaySubscription s;
  s.node = "rollout-1";
  auto channel = std::make_shared<RelayChannel>(
      "s1", s,
      [&](const v1::RelayDown&) {
        std::lock_guard<std::mutex> held(gate);
        return false;
      },
      [&] {
        if (cancels.fetch_add(1) == 0) gate.unlock();  // a cancelled stream's write returns
      });
  absl::Status last;
  const absl::Time start = absl::Now();
  for (size_t i = 0; i <= RelayChannel::kMaxQueued + 1 && last.ok(); ++i) {
    last = channel->Send(v1::RelayRequest()).status();
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(last.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(last.message(), HasSubstr("reads nothing"));
  EXPECT_GE(cancels.load(), 1);
  channel->Shutdown();
}

TEST(ReplyStatus, APeersCodeOutOfRangeIsUnknownAndItsTextIsSanitized) {
  absl::Status s = ReplyStatus(Reply(1, 99, "bad\nline"), "node x");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnknown);
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("\n")));
}

}  // namespace
}  // namespace wsync
