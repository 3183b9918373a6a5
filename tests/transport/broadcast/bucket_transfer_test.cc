// BucketTransfer against a scripted communicator and a real HTTP engine endpoint: what its launch
// writes and queues, in which order, and the status it reports when neither the broadcast nor
// the request can finish.
#include "daemon/transport/broadcast/bucket_transfer.h"

#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/host/host_platform.h"
#include "daemon/transport/broadcast/broadcast_binding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/sim_http_server.h"

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
    std::lock_guard<std::mutex> lock(mu_);
    queued_at.push_back(absl::Now());
    return queued_at.size() - 1;
  }
  absl::StatusOr<WireTiming> WaitBroadcast(uint64_t, absl::Time deadline) override {
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
  std::string aborted_reason() {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }
  size_t started() {
    std::lock_guard<std::mutex> lock(mu_);
    return queued_at.size();
  }
  absl::Time queued(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return queued_at.at(i);
  }

 private:
  std::string id_ = std::string(128, '\0');
  std::mutex mu_;
  std::condition_variable cv_;
  std::string reason_;
  std::vector<absl::Time> queued_at;
};

// An engine whose update route answers only when the test lets it, with the status it is given.
class HeldEngine {
 public:
  HeldEngine() {
    server_.Post("/update", [this](const SimHttpRequest& req, SimHttpResponse& res) {
      std::unique_lock<std::mutex> lock(mu_);
      bodies_.push_back(req.body);
      cv_.notify_all();
      cv_.wait_for(lock, std::chrono::seconds(10), [&] { return released_; });
      res.status = status_;
      res.set_content(status_ == 200 ? R"({"success": true})"
                                     : R"({"success": false, "message": "load_weights failed"})",
                      "application/json");
    });
    auto port = server_.Start("127.0.0.1", 0);
    EXPECT_TRUE(port.ok()) << port.status();
    url_ = absl::StrCat("http://127.0.0.1:", port.ok() ? *port : 0);
  }
  ~HeldEngine() {
    Release(200);
    server_.Stop();
  }
  void Release(int status) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    released_ = true;
    cv_.notify_all();
  }
  // Waits until `n` requests have reached the handler; returns their bodies.
  std::vector<std::string> Received(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(5), [&] { return bodies_.size() >= n; });
    return bodies_;
  }
  const std::string& url() const { return url_; }
  int max_waiting() const { return server_.max_waiting(); }

 private:
  SimHttpServer server_;
  std::string url_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  int status_ = 200;
  std::vector<std::string> bodies_;
};

// The broadcast binding of HeldEngineAdapter: names the bucket's first tensor in its request.
class HeldEngineBinding final : public BroadcastBinding {
 public:
  std::vector<RendezvousMode> RendezvousModes() const override {
    return {RendezvousMode::kTorchStore};
  }
  absl::Status InitGroup(const Rendezvous&) override { return absl::OkStatus(); }
  absl::Status DestroyGroup(const std::string&) override { return absl::OkStatus(); }
  absl::StatusOr<EngineRequest> BucketRequest(const BucketManifest& m, const std::string&,
                                              const BucketContext&) const override {
    return EngineRequest{"/update",
                         absl::StrCat(R"({"first": ")", m.tensors.front().name, R"("})")};
  }
  absl::StatusOr<std::vector<BroadcastPiece>> Pieces(const BucketManifest& m) const override {
    return std::vector<BroadcastPiece>{BroadcastPiece{0, m.span_bytes(), DType::kUint8}};
  }
};

class HeldEngineAdapter final : public EngineAdapter {
 public:
  explicit HeldEngineAdapter(std::string url) : endpoint_{std::move(url), 1, 1} {}
  const EngineEndpoint& endpoint() const override { return endpoint_; }
  void SetRankOffset(uint32_t rank_offset) override { endpoint_.rank_offset = rank_offset; }
  AdapterCapabilities Capabilities() const override { return AdapterCapabilities{}; }
  DataPathBinding* Binding(absl::string_view data_path) override {
    return data_path == kBroadcastDataPath ? &binding_ : nullptr;
  }
  absl::Status Probe() override { return absl::OkStatus(); }
  absl::Status PauseGeneration() override { return absl::OkStatus(); }
  absl::Status ResumeGeneration() override { return absl::OkStatus(); }
  absl::Status CheckBucketReply(const HttpReply& reply) const override {
    if (reply.status == 200) return absl::OkStatus();
    // As the real adapters: the status, never the engine's words.
    return absl::FailedPreconditionError(absl::StrCat("answered HTTP ", reply.status));
  }
  absl::Status FinishUpdate(const UpdateInfo&) override { return absl::OkStatus(); }
  EngineHealth Health() override {
    EngineHealth health;
    health.healthy = true;
    return health;
  }
  absl::Status ValidateBucket(const BucketManifest&) const override { return absl::OkStatus(); }

 private:
  EngineEndpoint endpoint_;
  HeldEngineBinding binding_;
};

class BucketTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto slot = platform_.AllocateSlot(0, 4096);
    ASSERT_TRUE(slot.ok()) << slot.status();
    slot_ = std::move(*slot);
  }
  std::unique_ptr<BucketTransfer> Start(const std::string& first_tensor) {
    return Start(first_tensor, &adapter_, channel_);
  }
  std::unique_ptr<BucketTransfer> Start(const std::string& first_tensor, EngineAdapter* adapter,
                                        std::shared_ptr<UpdateChannel> channel) {
    BucketManifest manifest;
    manifest.tensors.push_back(TensorEntry{first_tensor, DType::kUint8, {64}, 0, 64});
    auto transfer = BucketTransfer::Start(
        {adapter}, {std::move(channel)}, collective_, BucketSource{0, slot_.get(), nullptr},
        manifest, BucketContext{}, "g", "rank 1 = engine", absl::Now() + absl::Seconds(5),
        [this](const absl::Status& s) { hook_ = s; });
    EXPECT_TRUE(transfer.ok()) << transfer.status();
    return transfer.ok() ? std::move(*transfer) : nullptr;
  }
  HostPlatform platform_{"127.0.0.1", "127.0.0.1"};
  std::unique_ptr<SlotMemory> slot_;
  HeldEngine engine_;
  HeldEngineAdapter adapter_{engine_.url()};
  std::shared_ptr<UpdateChannel> channel_ = std::make_shared<UpdateChannel>(engine_.url());
  StalledCommunicator comm_;
  // The group's formation, shared by its buckets (the communicator is the fixture's).
  std::shared_ptr<FormedCollective> collective_ = std::make_shared<FormedCollective>(
      std::shared_ptr<RootCommunicator>(&comm_, [](RootCommunicator*) {}));
  absl::Status hook_;
};

TEST_F(BucketTransferTest, LaunchWritesTheRequestThenQueuesTheBroadcast) {
  auto transfer = Start("a");
  ASSERT_NE(transfer, nullptr);
  // All in the calling thread, before Start returns.
  EXPECT_TRUE(transfer->launched());
  ASSERT_EQ(comm_.started(), 1u);
  EXPECT_NE(transfer->requests_written_at(), absl::InfinitePast());
  EXPECT_LE(transfer->requests_written_at(), comm_.queued(0))
      << "a broadcast is queued only once its requests are written";
  EXPECT_THAT(engine_.Received(1), ::testing::ElementsAre(R"({"first": "a"})"));
  comm_.Abort("test done");
}

TEST_F(BucketTransferTest, ARequestThatCannotBeWrittenQueuesNoBroadcastAndAbortsTheCollective) {
  auto fd = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(fd.ok());
  const std::string refused = absl::StrCat("http://127.0.0.1:", *LocalPort(fd->get()));
  fd->reset();  // nobody listens there now
  HeldEngineAdapter gone(refused);
  auto transfer = Start("a", &gone, std::make_shared<UpdateChannel>(refused));
  ASSERT_NE(transfer, nullptr);
  EXPECT_FALSE(transfer->launched());
  EXPECT_EQ(comm_.started(), 0u) << "a broadcast no engine will join";
  EXPECT_FALSE(comm_.aborted_reason().empty()) << "the collective is aborted at once";
  auto sent = transfer->WaitReusable();
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kUnavailable) << sent.status();
  std::vector<EngineOutcome> outcomes;
  absl::Status answered = transfer->WaitAnswered(&outcomes);
  EXPECT_EQ(answered.code(), absl::StatusCode::kUnavailable) << answered;
  EXPECT_THAT(answered.message(), HasSubstr("engine " + refused));
}

TEST_F(BucketTransferTest, NextRequestWaitsAtTheEngineBehindTheLastOnOneConnection) {
  auto first = Start("a");
  auto second = Start("b");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(comm_.started(), 2u) << "both broadcasts queued back to back, no answer awaited";
  // The engine holds the first request; the second arrived behind it on the same connection.
  ASSERT_EQ(engine_.Received(1).size(), 1u);
  for (int i = 0; i < 500 && engine_.max_waiting() < 2; ++i) absl::SleepFor(absl::Milliseconds(2));
  EXPECT_EQ(engine_.max_waiting(), 2);
  EXPECT_EQ(engine_.Received(1).size(), 1u) << "taken one at a time";
  engine_.Release(200);
  EXPECT_THAT(engine_.Received(2),
              ::testing::ElementsAre(R"({"first": "a"})", R"({"first": "b"})"));
  comm_.Abort("test done");
}

TEST_F(BucketTransferTest, EngineErrorAbortsTheBroadcastAtOnceAndNamesTheEngine) {
  auto transfer = Start("a");
  ASSERT_NE(transfer, nullptr);
  ASSERT_EQ(engine_.Received(1).size(), 1u);
  const absl::Time failed_at = absl::Now();
  engine_.Release(400);
  auto sent = transfer->WaitReusable();
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kAborted) << sent.status();
  EXPECT_LT(absl::Now() - failed_at, absl::Seconds(2)) << "not at the 5 s deadline";
  std::vector<EngineOutcome> outcomes;
  absl::Status answered = transfer->WaitAnswered(&outcomes);
  EXPECT_EQ(answered.code(), absl::StatusCode::kFailedPrecondition) << answered;
  EXPECT_THAT(answered.message(), HasSubstr(engine_.url()));
  EXPECT_THAT(answered.message(), HasSubstr("answered HTTP 400"));
  EXPECT_EQ(hook_.code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(BucketTransferTest, ABucketLaunchedAfterAnEnginesErrorReachesNoEngine) {
  auto failed = Start("a");
  ASSERT_NE(failed, nullptr);
  ASSERT_EQ(engine_.Received(1).size(), 1u);
  engine_.Release(400);  // the engine's error: the group's engines are out of step from here on
  auto sent = failed->WaitReusable();
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kAborted);
  auto later = Start("b");
  ASSERT_NE(later, nullptr);
  EXPECT_FALSE(later->launched());
  EXPECT_EQ(comm_.started(), 1u) << "no broadcast after the failure";
  std::vector<EngineOutcome> outcomes;
  absl::Status answered = later->WaitAnswered(&outcomes);
  EXPECT_EQ(answered.code(), absl::StatusCode::kAborted) << answered;
  EXPECT_THAT(answered.message(), HasSubstr("an earlier bucket of this group failed"));
  absl::SleepFor(absl::Milliseconds(200));  // time for a request, had one been written, to arrive
  EXPECT_EQ(engine_.Received(1).size(), 1u) << "the later bucket's request was never written";
}

TEST_F(BucketTransferTest, RequestsCancelledBehindAnAbortedBroadcastFailTheBucketNeverOk) {
  auto transfer = Start("a");
  ASSERT_NE(transfer, nullptr);
  ASSERT_EQ(engine_.Received(1).size(), 1u);
  // Another bucket's failure aborts the collective under this one.
  comm_.Abort("another bucket failed");
  auto sent = transfer->WaitReusable();
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kAborted) << sent.status();
  std::vector<EngineOutcome> outcomes;
  absl::Status answered = transfer->WaitAnswered(&outcomes);
  // Only a cancelled request and an aborted broadcast: still a failure with an error code, never
  // an OK status carrying an error message (which the update would take for success).
  EXPECT_EQ(answered.code(), absl::StatusCode::kAborted) << answered;
  EXPECT_THAT(answered.message(), HasSubstr("no answer yet from " + engine_.url()));
  EXPECT_EQ(hook_.code(), absl::StatusCode::kAborted);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].status.code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace wsync
