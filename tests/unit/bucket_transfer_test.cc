// BucketTransfer against a scripted communicator and engine: the status it reports when a
// bucket's request never goes out.
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
  absl::StatusOr<uint64_t> StartBroadcast(SlotMemory&, const std::vector<BroadcastPiece>&,
                                          absl::Time) override {
    return 0;
  }
  absl::StatusOr<BroadcastTiming> WaitBroadcast(uint64_t, absl::Time deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    // Past the deadline only as a safety net: the gate's own deadline aborts first.
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

 private:
  std::string id_ = std::string(128, '\0');
  std::mutex mu_;
  std::condition_variable cv_;
  std::string reason_;
};

class CountingEngine final : public EngineAdapter {
 public:
  const EngineEndpoint& endpoint() const override { return endpoint_; }
  absl::Status Probe() override { return absl::OkStatus(); }
  absl::Status InitGroup(const Rendezvous&) override { return absl::OkStatus(); }
  absl::Status DestroyGroup(const std::string&) override { return absl::OkStatus(); }
  absl::Status PauseGeneration() override { return absl::OkStatus(); }
  absl::Status ResumeGeneration() override { return absl::OkStatus(); }
  absl::Status PostBucket(const BucketManifest&, const std::string&, absl::Time,
                          HttpCallControl*) override {
    ++posts;
    return absl::OkStatus();
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

TEST(BucketTransfer, RequestHeldPastItsDeadlineFailsTheBucketWithAnErrorCodeNeverOk) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  auto slot = platform.AllocateSlot(0, 4096);
  ASSERT_TRUE(slot.ok()) << slot.status();
  StalledCommunicator comm;
  CountingEngine engine;
  BucketManifest manifest;
  manifest.tensors.push_back(TensorEntry{"w", DType::kUint8, {64}, 0, 64});
  // The predecessor never reaches its engines, so this bucket's gate is never opened.
  auto gate = std::make_shared<RequestGate>();
  absl::Status hook;
  auto transfer = BucketTransfer::Start(
      {&engine}, &comm, **slot, manifest, "g", "rank 1 = engine-a", gate,
      absl::Now() + absl::Milliseconds(200), [&](const absl::Status& s) { hook = s; });
  ASSERT_TRUE(transfer.ok()) << transfer.status();
  auto sent = (*transfer)->WaitSent();
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kAborted) << sent.status();
  std::vector<EngineOutcome> outcomes;
  absl::Status answered = (*transfer)->WaitAnswered(&outcomes);
  // Only a cancelled request and an aborted broadcast: this once came back as an OK status with
  // an error message, which the update took for success.
  EXPECT_EQ(answered.code(), absl::StatusCode::kAborted) << answered;
  EXPECT_THAT(answered.message(), HasSubstr("no answer yet from http://engine-a"));
  EXPECT_EQ(hook.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(engine.posts.load(), 0) << "a request behind a closed gate must never be posted";
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status.code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace wsync
