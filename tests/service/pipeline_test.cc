// The update pipeline: requests pipelined at the engine and broadcasts queued back to back, what
// per-tensor groups send, and that a failure with a second bucket already posted leaves the
// engines in step.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/service/service_fixture.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST_F(ServiceFixture, NextRequestWaitsAtTheEngineWhileItFinishesTheLastAndBytesStayExact) {
  CreatePolicyGroup();
  SetKnobs(sim_a_, R"({"answer_delay_ms": 150})");
  SetKnobs(sim_b_, R"({"answer_delay_ms": 150})");
  for (uint32_t v = 1; v <= 3; ++v) {
    auto model = SmallModel(v);
    auto result = client_->Push("policy", absl::StrCat("v", v), Refs(model));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_GE(result->buckets, 3u);
    ExpectHolds(*sim_a_.sim, model, absl::StrCat("v", v), 1);
    ExpectHolds(*sim_b_.sim, model, absl::StrCat("v", v), 2);
  }
  // Requests were written while the engine still worked on the last one, and waited for it on
  // the same connection.
  EXPECT_GE(sim_a_.sim->max_waiting_requests(), 2);
  EXPECT_GE(sim_b_.sim->max_waiting_requests(), 2);
}

TEST_F(ServiceFixture, BroadcastsQueueBackToBackWithoutWaitingForAnswers) {
  // With answers 100 ms late, waiting for them would hand broadcasts over at least that far
  // apart; pipelined, the next one is queued as soon as its slot is filled and its requests are
  // written.
  CreatePolicyGroup();
  SetKnobs(sim_a_, R"({"answer_delay_ms": 100})");
  SetKnobs(sim_b_, R"({"answer_delay_ms": 100})");
  auto model = SmallModel(1);
  auto result = client_->Push("policy", "v1", Refs(model));
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectHolds(*sim_a_.sim, model, "v1", 1);
  const std::vector<BroadcastRecord> starts = broadcasts_.records();
  ASSERT_GE(starts.size(), 3u);
  EXPECT_LT(starts[1].at - starts[0].at, absl::Milliseconds(90));
}

TEST_F(ServiceFixture, SlotsRecycleAtTheWiresPaceNotTheAnswers) {
  // Data-plane mode (the benchmark's): every receive is posted ahead and the engines answer 300 ms
  // after each request. A slot is free once its bytes have left rank 0, so with 2 slots and 4+
  // buckets no broadcast waits for an answer. (Freeing bucket k+1's slot only after bucket k's
  // answer once held the fourth bucket about 250 ms here.)
  CreatePolicyGroup();
  auto model = SmallModel(2);
  PushAndExpectHeld("v1", SmallModel(1));  // the engine ranks join the collective
  std::vector<uint64_t> sizes;
  for (const BroadcastRecord& r : broadcasts_.records()) sizes.push_back(r.bytes);
  ASSERT_GE(sizes.size(), 4u);
  const size_t before = sizes.size();
  for (const RunningSim* sim : {&sim_a_, &sim_b_}) {
    SetKnobs(*sim, R"({"data_plane": true, "answer_delay_ms": 300})");
    httplib::Client http(sim->url);
    auto posted = http.Post("/sim/receive_ahead", nlohmann::json({{"sizes", sizes}}).dump(),
                            "application/json");
    ASSERT_TRUE(posted && posted->status == 200) << (posted ? posted->body : "no answer");
  }
  auto result = client_->Push("policy", "v2", Refs(model));
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<BroadcastRecord> all = broadcasts_.records();
  ASSERT_EQ(all.size(), 2 * before);
  for (size_t i = before + 1; i < all.size(); ++i) {
    EXPECT_LT(all[i].at - all[i - 1].at, absl::Milliseconds(200)) << "broadcast " << i - before;
  }
  // The bytes the ranks received ahead are the model's buckets, in order.
  std::vector<std::string> expected;
  std::vector<uint8_t> bucket;
  size_t k = 0;
  for (const OwnedTensor& t : model) {
    bucket.insert(bucket.end(), t.data.begin(), t.data.end());
    if (k < sizes.size() && bucket.size() == sizes[k]) {
      expected.push_back(Crc32Hex(Crc32(bucket.data(), bucket.size())));
      bucket.clear();
      ++k;
    }
  }
  ASSERT_EQ(expected.size(), sizes.size()) << "buckets hold whole tensors back to back";
  for (const auto& [sim, ranks] :
       {std::pair{&sim_a_, std::vector<std::string>{"1"}}, {&sim_b_, {"2", "3"}}}) {
    httplib::Client http(sim->url);
    nlohmann::json received;
    for (int i = 0; i < 200; ++i) {
      auto r = http.Get("/sim/received");
      ASSERT_TRUE(r && r->status == 200);
      received = nlohmann::json::parse(r->body)["ranks"];
      bool all_in = true;
      for (const auto& rank : ranks) all_in = all_in && received[rank].size() == expected.size();
      if (all_in) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    for (const auto& rank : ranks) {
      EXPECT_EQ(received[rank].get<std::vector<std::string>>(), expected) << "rank " << rank;
    }
  }
}

TEST_F(ServiceFixture, FailedBucketStopsEveryLaterBucketAndTheGroupReforms) {
  // An engine fails a bucket (an error in its load_weights). At most the one request already
  // pipelined behind it also reached the engines (2 slots); nothing launched after the failure
  // does, and the update fails naming the engine that failed. Broadcasts are held 200 ms, as a
  // wire slower than loopback TCP would hold them, so that no slot is refilled before the
  // engine's error is in: on loopback, a small bucket leaves rank 0 into the socket buffers at
  // once, and a refill could race the error.
  CreatePolicyGroup();
  ASSERT_TRUE(client_->Push("policy", "v1", Refs(SmallModel(1))).ok());
  broadcasts_.set_hold(absl::Milliseconds(200));
  const int a_before = sim_a_.sim->updates_received();
  const int b_before = sim_b_.sim->updates_received();
  SetKnobs(sim_b_, absl::StrCat(R"({"answer_delay_ms": 100, "fail_update_at": )", b_before, "}"));
  auto failed = client_->Push("policy", "v2", Refs(SmallModel(2)));
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr(sim_b_.url));
  EXPECT_THAT(std::string(failed.status().message()), Not(HasSubstr("request not sent")));
  EXPECT_LE(sim_a_.sim->updates_received(), a_before + 2);
  EXPECT_LE(sim_b_.sim->updates_received(), b_before + 2);
  EXPECT_EQ(GetGroup("policy").state(), v1::GROUP_STATE_BROKEN);
  PushAndExpectHeld("v3", SmallModel(3));
}

TEST_F(ServiceFixture, PerTensorGroupReceivesEveryTensorAsItsOwnBroadcast) {
  CreatePolicyGroup("per_tensor");
  EXPECT_EQ(GetGroup("policy").spec().sglang().load_format(), v1::SGLANG_LOAD_FORMAT_PER_TENSOR);
  for (uint32_t v = 1; v <= 2; ++v) PushAndExpectHeld(absl::StrCat("v", v), SmallModel(v));
}

TEST_F(ServiceFixture, FailureWithTheNextBucketPostedLeavesNoEngineOutOfStep) {
  CreatePolicyGroup();
  ASSERT_TRUE(client_->Push("policy", "v1", Refs(SmallModel(1))).ok());
  // Engine b fails the first bucket of the next update after receiving it (an error in its
  // load_weights), when the daemon has already posted the second bucket's request.
  SetKnobs(sim_a_, R"({"answer_delay_ms": 100})");
  SetKnobs(sim_b_, absl::StrCat(R"({"answer_delay_ms": 100, "fail_update_at": )",
                                sim_b_.sim->updates_received(), "}"));
  auto failed = client_->Push("policy", "v2", Refs(SmallModel(2)));
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr(sim_b_.url));
  EXPECT_EQ(GetGroup("policy").state(), v1::GROUP_STATE_BROKEN);
  // The group re-forms and the engines read exactly the next update's bytes.
  PushAndExpectHeld("v3", SmallModel(3));
}

TEST_F(ServiceFixture, TensorsLargerThanASlotTravelAloneThroughTheOversizeSlot) {
  CreatePolicyGroup();
  auto make = [](uint32_t version, int64_t embed_rows) {
    std::vector<OwnedTensor> model = SmallModel(version);
    // 1 MiB slots; the embedding is 1.5 MiB, then 2.5 MiB: both fit the one oversize slot.
    OwnedTensor embed{"model.embed_tokens.weight",
                      DType::kBfloat16,
                      {embed_rows, 1024},
                      std::vector<uint8_t>(embed_rows * 2048)};
    for (size_t i = 0; i < embed.data.size(); ++i)
      embed.data[i] = static_cast<uint8_t>(i * 13 + version);
    model[0] = std::move(embed);
    return model;
  };
  for (auto [version, rows] : {std::pair{1u, 768}, std::pair{2u, 768}, std::pair{3u, 1280}}) {
    PushAndExpectHeld(absl::StrCat("v", version), make(version, rows));
  }
  v1::ListBuffersResponse buffers;
  grpc::ClientContext ctx;
  ASSERT_TRUE(client_->admin()->ListBuffers(&ctx, v1::ListBuffersRequest(), &buffers).ok());
  ASSERT_EQ(buffers.buffers_size(), 3) << "two slots and one oversize slot, made once";
  EXPECT_EQ(buffers.buffers(2).index(), 2u);
  EXPECT_EQ(buffers.buffers(2).bytes(), 64u << 20) << "rounded up to 64 MiB";
}

TEST_F(ServiceFixture, EngineRestartedBetweenUpdatesIsRejoinedBeforeTheNextUpdate) {
  CreatePolicyGroup();
  ASSERT_TRUE(client_->Push("policy", "v1", Refs(SmallModel(1))).ok());
  // Engine a restarts on the same address: its store connection closes and the new process does
  // not hold the group. The next update must re-form the group first instead of failing.
  const int port = std::stoi(sim_a_.url.substr(sim_a_.url.rfind(':') + 1));
  sim_a_.sim.reset();
  sim_a_ = StartSim(1, {}, port);
  ASSERT_NE(sim_a_.sim, nullptr);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  auto model = SmallModel(2);
  auto result = client_->Push("policy", "v2", Refs(model));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(absl::Now(), deadline);
  ExpectHolds(*sim_a_.sim, model, "v2", 1);
  ExpectHolds(*sim_b_.sim, model, "v2", 2);
  auto updates = Updates();
  ASSERT_EQ(updates.size(), 2u);
  EXPECT_EQ(updates.back().state(), "committed") << "no failed update in between";
}

class NoChecksumFixture : public ServiceFixture {
 protected:
  void Configure(DaemonOptions& options) override { options.checksum = "none"; }
};

TEST_F(NoChecksumFixture, ChecksumNoneSkipsBothSidesAndBytesStillArrive) {
  CreatePolicyGroup();
  auto model = SmallModel(1);
  auto result = client_->Push("policy", "v1", Refs(model));
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectHolds(*sim_a_.sim, model, "v1", 1);
  EXPECT_EQ(result->verify_seconds, 0.0);
  // A bucket announcing a wrong checksum goes through: nothing is verified.
  UpdateStream stream(client_->trainer(), absl::Seconds(30));
  ASSERT_TRUE(stream.Begin(client_->session_id(), "policy", "v2").ok());
  std::vector<uint8_t> bytes(1000, 9);
  ASSERT_TRUE(client_->slot(0)->CopyIn(0, bytes.data(), bytes.size()).ok());
  v1::Bucket b;
  b.set_slot(0);
  b.set_checksum(12345);
  *b.add_tensors() = Spec("w", "uint8", {1000}, 0, 1000);
  ASSERT_TRUE(stream.SendBucket(b));
  ASSERT_TRUE(stream.Commit());
  v1::UpdateEvent e;
  v1::UpdateResult final_result;
  while (stream.Next(&e)) {
    if (e.has_result()) final_result = e.result();
  }
  EXPECT_EQ(final_result.code(), 0) << final_result.message();
}

}  // namespace
}  // namespace wsync
