// OrderedReceiver: a downstream's streams receive side by side and hand their buckets on in the
// update's order.
#include "daemon/relay/ordered_receiver.h"

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Log {
  std::mutex mu;
  std::vector<std::string> events;
  void Add(std::string e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(std::move(e));
  }
};

OrderedReceiver::Job JobOf(uint64_t index, size_t stream, std::function<absl::Status()> receive,
                           Log* log) {
  OrderedReceiver::Job job;
  job.index = index;
  job.stream = stream;
  job.receive = std::move(receive);
  job.hand_on = [index, log](absl::Status received) {
    log->Add(absl::StrCat("hand on ", index, received.ok() ? "" : " failed"));
  };
  return job;
}

TEST(OrderedReceiver, StreamsReceiveSideBySideAndHandOnInTheUpdatesOrder) {
  OrderedReceiver receiver(2);
  ASSERT_TRUE(receiver.Reset(0).ok());
  Log log;
  // Bucket 0 (stream 0) finishes its receive only once bucket 1 (stream 1) has received: were
  // the streams' receives one after another, it would wait out its 5 s and fail.
  std::promise<void> second_received;
  std::shared_future<void> second = second_received.get_future().share();
  ASSERT_TRUE(receiver
                  .Add(JobOf(
                      0, 0,
                      [&, second] {
                        if (second.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
                          return absl::DeadlineExceededError("stream 1 never received");
                        }
                        log.Add("received 0");
                        return absl::OkStatus();
                      },
                      &log))
                  .ok());
  ASSERT_TRUE(receiver
                  .Add(JobOf(
                      1, 1,
                      [&] {
                        log.Add("received 1");
                        second_received.set_value();
                        return absl::OkStatus();
                      },
                      &log))
                  .ok());
  ASSERT_TRUE(receiver
                  .Add(JobOf(
                      2, 1,
                      [&] {
                        log.Add("received 2");
                        return absl::OkStatus();
                      },
                      &log))
                  .ok());
  receiver.Drain();
  // Bucket 1 landed first, but nothing was handed on before bucket 0.
  std::vector<std::string> hand_ons;
  for (const std::string& e : log.events) {
    if (e.rfind("hand on", 0) == 0) hand_ons.push_back(e);
  }
  EXPECT_THAT(hand_ons, ElementsAre("hand on 0", "hand on 1", "hand on 2"));
  EXPECT_EQ(log.events.front(), "received 1");
}

TEST(OrderedReceiver, AFailedReceiveIsHandedOnInItsTurnWithItsStatus) {
  OrderedReceiver receiver(2);
  ASSERT_TRUE(receiver.Reset(7).ok());
  Log log;
  ASSERT_TRUE(receiver
                  .Add(JobOf(
                      7, 1, [] { return absl::AbortedError("pair aborted"); }, &log))
                  .ok());
  ASSERT_TRUE(receiver
                  .Add(JobOf(
                      8, 0, [] { return absl::OkStatus(); }, &log))
                  .ok());
  receiver.Drain();
  EXPECT_THAT(log.events, ElementsAre("hand on 7 failed", "hand on 8"));
}

TEST(OrderedReceiver, RefusesABucketOutOfOrderOrOnAStreamItDoesNotHave) {
  OrderedReceiver receiver(2);
  ASSERT_TRUE(receiver.Reset(0).ok());
  Log log;
  std::atomic<int> ran{0};
  auto receive = [&] {
    ++ran;
    return absl::OkStatus();
  };
  absl::Status skipped = receiver.Add(JobOf(1, 0, receive, &log));
  EXPECT_EQ(skipped.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(skipped.message(), HasSubstr("bucket 1 came where bucket 0 was due"));
  absl::Status stream = receiver.Add(JobOf(0, 2, receive, &log));
  EXPECT_EQ(stream.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(stream.message(), HasSubstr("stream 2 of 2"));
  ASSERT_TRUE(receiver.Add(JobOf(0, 0, receive, &log)).ok());
  absl::Status again = receiver.Add(JobOf(0, 1, receive, &log));
  EXPECT_THAT(again.message(), HasSubstr("bucket 0 came where bucket 1 was due"));
  receiver.Drain();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_THAT(log.events, ElementsAre("hand on 0"));
}

TEST(OrderedReceiver, ANewUpdateWaitsForTheLastOnesBucketsToBeHandedOn) {
  OrderedReceiver receiver(1);
  ASSERT_TRUE(receiver.Reset(0).ok());
  Log log;
  std::promise<void> land;
  std::shared_future<void> landed = land.get_future().share();
  ASSERT_TRUE(receiver
                  .Add(JobOf(
                      0, 0,
                      [landed] {
                        landed.wait_for(std::chrono::seconds(5));
                        return absl::OkStatus();
                      },
                      &log))
                  .ok());
  // The straggler is still on the wire: its order is not started over under it.
  absl::Status early = receiver.Reset(0);
  EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(early.message(), HasSubstr("1 bucket(s) of the last update"));
  land.set_value();
  receiver.Drain();
  EXPECT_TRUE(receiver.Reset(0).ok());
  EXPECT_THAT(log.events, ElementsAre("hand on 0"));
}

}  // namespace
}  // namespace wsync
