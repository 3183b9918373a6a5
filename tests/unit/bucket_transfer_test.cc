// BucketTransfer against a scripted communicator and engine: when its broadcast is queued, and
// the status it reports when neither the broadcast nor the request can finish.
#include "daemon/core/bucket_transfer.h"

#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/host/host_platform.h"
#include "daemon/core/request_gate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

// Its broadcasts never finish on their own: only Abort ends them, as a queued NCCL broadcast
// whose receivers never join ends only with ncclCommAbort.
class StalledCommunicator final : public RootCommunicator {
 public:
  const std::string& unique_id() const override { return id_; }
  int world_size() const override { return 2; }
  absl::StatusOr<uint64_t> StartBroadcastFrom(SlotMemory&, const void*,
                                              const std::vector<BroadcastPiece>&,
                                              absl::Time) override {
    ++started;
    return 0;
  }
  absl::StatusOr<BroadcastTiming> WaitBroadcast(uint64_t, absl::Time deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    // Past the deadline only as a safety net: the tests abort first.
    cv_.wait_until(lock, absl::ToChronoTime(deadline + absl::Seconds(10)),
                   [&] { return !reason_.empty(); });
    if (reason_.empty()) return absl::DeadlineExceededError("broadcast deadline");
    return absl::AbortedError(absl::StrCat("communicator aborted: ", reason_));
  }
  void Abort(absl::string_view reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (reason_.empty()) reason_ = std::string(reason);
    cv_.notify_all();
  }
  std::string Describe() const override { return "stalled"; }
  std::atomic<int> started{0};

 private:
  std::string id_ = std::string(128, '\0');
  std::mutex mu_;
  std::condition_variable cv_;
  std::string reason_;
};

// Its update requests wait for bytes that never come: they end only when cancelled.
class WaitingEngine final : public EngineAdapter {
 public:
  const EngineEndpoint& endpoint() const override { return endpoint_; }
  absl::Status Probe() override { return absl::OkStatus(); }
  absl::Status InitGroup(const Rendezvous&) override { return absl::OkStatus(); }
  absl::Status DestroyGroup(const std::string&) override { return absl::OkStatus(); }
  absl::Status PauseGeneration() override { return absl::OkStatus(); }
  absl::Status ResumeGeneration() override { return absl::OkStatus(); }
  absl::Status PostBucket(const BucketManifest&, const std::string&, absl::Time,
                          HttpCallControl* cancel) override {
    ++posts;
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!cancel->cancelled() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    return absl::CancelledError("POST cancelled");
  }
  absl::Status FinishUpdate(const std::string&) override { return absl::OkStatus(); }
  EngineHealth Health() override { return EngineHealth{true, "", "", ""}; }
  absl::Status ValidateBucket(const BucketManifest&) const override { return absl::OkStatus(); }
  std::vector<BroadcastPiece> BroadcastPieces(const BucketManifest& m) const override {
    return {BroadcastPiece{0, m.span_bytes(), DType::kUint8}};
  }
  std::atomic<int> posts{0};

 private:
  EngineEndpoint endpoint_{"http://engine-a", 1, 1};
};

class BucketTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto slot = platform_.AllocateSlot(0, 4096);
    ASSERT_TRUE(slot.ok()) << slot.status();
    slot_ = std::move(*slot);
    manifest_.tensors.push_back(TensorEntry{"w", DType::kUint8, {64}, 0, 64});
  }
  std::unique_ptr<BucketTransfer> Start(std::shared_ptr<RequestGate> gate) {
    auto transfer = BucketTransfer::Start(
        {&engine_}, &comm_, *slot_, nullptr, manifest_, "g", "rank 1 = engine-a", std::move(gate),
        absl::Now() + absl::Seconds(5), [this](const absl::Status& s) { hook_ = s; });
    EXPECT_TRUE(transfer.ok()) << transfer.status();
    return transfer.ok() ? std::move(*transfer) : nullptr;
  }
  HostPlatform platform_{"127.0.0.1", "127.0.0.1"};
  std::unique_ptr<SlotMemory> slot_;
  BucketManifest manifest_;
  StalledCommunicator comm_;
  WaitingEngine engine_;
  absl::Status hook_;
};

TEST_F(BucketTransferTest, BroadcastIsQueuedWhenTheGateOpensAndNeverWhenItCloses) {
  auto gate = std::make_shared<RequestGate>();
  auto opened = Start(gate);
  ASSERT_NE(opened, nullptr);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(comm_.started.load(), 0) << "queued before its request may go";
  EXPECT_EQ(engine_.posts.load(), 0);
  gate->Open();
  EXPECT_EQ(comm_.started.load(), 1) << "queued by the thread that opened the gate";

  auto shut = std::make_shared<RequestGate>();
  auto closed = Start(shut);
  ASSERT_NE(closed, nullptr);
  shut->Close(absl::AbortedError("an earlier bucket of this update failed"));
  EXPECT_EQ(comm_.started.load(), 1) << "a closed gate never queues its broadcast";
  auto sent = closed->WaitSent();
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kAborted) << sent.status();
  EXPECT_THAT(sent.status().message(), HasSubstr("not sent: an earlier bucket"));
  comm_.Abort("test done");  // ends the first transfer's broadcast and requests
}

TEST_F(BucketTransferTest, RequestsCancelledBehindAnAbortedBroadcastFailTheBucketNeverOk) {
  auto gate = std::make_shared<RequestGate>();
  gate->Open();
  auto transfer = Start(gate);
  ASSERT_NE(transfer, nullptr);
  for (int i = 0; i < 1000 && engine_.posts.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(engine_.posts.load(), 1);
  // Another bucket's failure aborts the collective under this one.
  comm_.Abort("another bucket failed");
  auto sent = transfer->WaitSent();
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kAborted) << sent.status();
  std::vector<EngineOutcome> outcomes;
  absl::Status answered = transfer->WaitAnswered(&outcomes);
  // Only a cancelled request and an aborted broadcast: this once came back as an OK status with
  // an error message, which the update took for success (and wsyncd crashed on).
  EXPECT_EQ(answered.code(), absl::StatusCode::kAborted) << answered;
  EXPECT_THAT(answered.message(), HasSubstr("no answer yet from http://engine-a"));
  EXPECT_EQ(hook_.code(), absl::StatusCode::kAborted);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status.code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace wsync
