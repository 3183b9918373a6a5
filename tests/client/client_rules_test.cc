// The C++ client plans its buckets under the bucket rules wsyncd announces in UpdateStarted, and
// marks the bucket it knows to be last. A fake Trainer service stands in for wsyncd, so the client
// is tested on its own: it hands out shared-memory slots, announces the rules it was given,
// records every bucket with the bytes its slot held, and answers as the daemon does.

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "client/cpp/push_stream.h"
#include "common/bucket_planner.h"
#include "common/checksum.h"
#include "common/host/shm_slot.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSlotBytes = 4096;
constexpr uint32_t kSlots = 2;

struct ReceivedBucket {
  v1::Bucket wire;
  std::map<std::string, std::string> bytes;  // tensor name -> its bytes as the slot held them
};

class FakeTrainer final : public v1::Trainer::Service {
 public:
  explicit FakeTrainer(v1::BucketRules rules) : rules_(std::move(rules)) {}

  grpc::Status OpenSession(grpc::ServerContext*, const v1::OpenSessionRequest* req,
                           v1::OpenSessionResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t i = 0; i < kSlots; ++i) {
      auto slot = ShmSlot::Create(req->device(), kSlotBytes);
      if (!slot.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "no shm");
      v1::SlotInfo* info = resp->add_slots();
      info->set_index(i);
      info->set_bytes(kSlotBytes);
      info->set_kind(v1::SLOT_MEMORY_HOST_SHM);
      info->set_memory_handle((*slot)->memory_handle());
      slots_.push_back(std::move(*slot));
    }
    resp->set_session_id("session");
    resp->set_device(req->device());
    resp->set_lease_seconds(60);
    resp->set_checksum("crc32");
    return grpc::Status::OK;
  }

  grpc::Status KeepAlive(grpc::ServerContext*, const v1::KeepAliveRequest*,
                         v1::KeepAliveResponse*) override {
    return grpc::Status::OK;
  }

  grpc::Status CloseSession(grpc::ServerContext*, const v1::CloseSessionRequest*,
                            v1::CloseSessionResponse*) override {
    return grpc::Status::OK;
  }

  grpc::Status ReserveOversizeSlot(grpc::ServerContext*, const v1::ReserveOversizeSlotRequest* req,
                                   v1::SlotInfo* info) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto slot = ShmSlot::Create(0, req->bytes());
    if (!slot.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "no shm");
    info->set_index(kSlots);
    info->set_bytes(req->bytes());
    info->set_kind(v1::SLOT_MEMORY_HOST_SHM);
    info->set_memory_handle((*slot)->memory_handle());
    oversize_ = std::move(*slot);
    return grpc::Status::OK;
  }

  grpc::Status Update(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::UpdateEvent, v1::UpdateRequest>* stream) override {
    v1::UpdateRequest req;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++updates_;
    }
    if (!stream->Read(&req) || !req.has_begin()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "begin first");
    }
    v1::UpdateEvent started;
    started.mutable_started()->set_update_id("update-1");
    started.mutable_started()->set_world_size(1);
    *started.mutable_started()->mutable_bucket_rules() = rules_;
    stream->Write(started);
    uint64_t buckets = 0, bytes = 0;
    while (stream->Read(&req)) {
      if (req.has_abort()) return grpc::Status(grpc::StatusCode::ABORTED, req.abort().reason());
      if (req.has_commit()) break;
      if (!req.has_bucket()) continue;
      const v1::Bucket& b = req.bucket();
      ReceivedBucket got{b, {}};
      uint64_t span = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        SlotMemory* slot = b.slot() < kSlots ? slots_[b.slot()].get() : oversize_.get();
        for (const v1::TensorSpec& t : b.tensors()) {
          got.bytes[t.name()] =
              std::string(static_cast<const char*>(slot->data()) + t.offset(), t.length());
          span = std::max<uint64_t>(span, t.offset() + t.length());
        }
        if (Crc32(slot->data(), span) != b.checksum()) {
          return grpc::Status(grpc::StatusCode::DATA_LOSS, "checksum mismatch");
        }
        received_.push_back(std::move(got));
      }
      ++buckets;
      bytes += span;
      v1::UpdateEvent free;
      free.mutable_slot_free()->set_slot(b.slot());
      stream->Write(free);
      v1::UpdateEvent done;
      done.mutable_bucket_done()->set_sequence(b.sequence());
      done.mutable_bucket_done()->set_bytes(span);
      done.mutable_bucket_done()->set_tensors(b.tensors_size());
      stream->Write(done);
    }
    v1::UpdateEvent result;
    result.mutable_result()->set_update_id("update-1");
    result.mutable_result()->set_buckets(buckets);
    result.mutable_result()->set_bytes(bytes);
    stream->Write(result);
    return grpc::Status::OK;
  }

  std::vector<ReceivedBucket> received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }
  int updates() {
    std::lock_guard<std::mutex> lock(mu_);
    return updates_;
  }

 private:
  const v1::BucketRules rules_;
  std::mutex mu_;
  std::vector<std::unique_ptr<ShmSlot>> slots_;
  std::unique_ptr<ShmSlot> oversize_;
  std::vector<ReceivedBucket> received_;
  int updates_ = 0;
};

struct OwnedTensor {
  std::string name;
  DType dtype;
  int64_t numel;
  std::string data;
};

OwnedTensor Make(const std::string& name, DType dtype, int64_t numel) {
  OwnedTensor t{name, dtype, numel, std::string(numel * DTypeSize(dtype), '\0')};
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<char>(i * 7 + name.size());
  return t;
}

std::vector<TensorRef> Refs(const std::vector<OwnedTensor>& ts) {
  std::vector<TensorRef> out;
  for (const OwnedTensor& t : ts) {
    out.push_back(TensorRef{t.name, t.dtype, {t.numel}, t.data.data(), t.data.size()});
  }
  return out;
}

std::vector<TensorDesc> Descs(const std::vector<OwnedTensor>& ts) {
  std::vector<TensorDesc> out;
  for (const OwnedTensor& t : ts)
    out.push_back(TensorDesc{t.name, t.dtype, {t.numel}, t.data.size()});
  return out;
}

// Mixed dtypes and sizes: bf16 runs interrupted by fp32 norms and an int64 counter.
std::vector<OwnedTensor> MixedModel() {
  std::vector<OwnedTensor> ts;
  for (int layer = 0; layer < 4; ++layer) {
    const std::string p = absl::StrCat("layers.", layer, ".");
    ts.push_back(Make(p + "q", DType::kBfloat16, 300));
    ts.push_back(Make(p + "k", DType::kBfloat16, 200));
    ts.push_back(Make(p + "norm", DType::kFloat32, 64));
    ts.push_back(Make(p + "mlp", DType::kBfloat16, 900));
  }
  ts.push_back(Make("step", DType::kInt64, 1));
  ts.push_back(Make("lm_head", DType::kBfloat16, 700));
  return ts;
}

// Each received bucket as the manifest a receiver would check.
BucketManifest ManifestOf(const v1::Bucket& b) {
  BucketManifest m;
  for (const v1::TensorSpec& t : b.tensors()) {
    m.tensors.push_back(TensorEntry{t.name(),
                                    *ParseDType(t.dtype()),
                                    {t.shape().begin(), t.shape().end()},
                                    t.offset(),
                                    t.length()});
  }
  return m;
}

// The tensor names of each bucket, as sent and as planned.
std::vector<std::vector<std::string>> Names(const std::vector<ReceivedBucket>& got) {
  std::vector<std::vector<std::string>> out;
  for (const ReceivedBucket& b : got) {
    out.emplace_back();
    for (const v1::TensorSpec& t : b.wire.tensors()) out.back().push_back(t.name());
  }
  return out;
}

std::vector<std::vector<std::string>> Names(const std::vector<PlannedBucket>& plan,
                                            const std::vector<OwnedTensor>& ts) {
  std::vector<std::vector<std::string>> out;
  for (const PlannedBucket& b : plan) {
    out.emplace_back();
    for (const PlannedTensor& t : b.tensors) out.back().push_back(ts[t.index].name);
  }
  return out;
}

v1::BucketRules ProtoRules(bool one_dtype, uint64_t close_after_bytes) {
  v1::BucketRules r;
  r.set_one_dtype(one_dtype);
  r.set_close_after_bytes(close_after_bytes);
  return r;
}

class ClientRulesTest : public ::testing::Test {
 protected:
  void Start(v1::BucketRules rules) {
    fake_ = std::make_unique<FakeTrainer>(std::move(rules));
    grpc::ServerBuilder builder;
    builder.RegisterService(fake_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    client_ = Client::FromChannel(server_->InProcessChannel(grpc::ChannelArguments()));
    ASSERT_TRUE(client_->OpenSession(0, "rules test").ok());
  }

  void TearDown() override {
    client_.reset();
    if (server_) server_->Shutdown();
  }

  // Every tensor arrived once, in order, with its own bytes.
  void ExpectDelivered(const std::vector<OwnedTensor>& ts) {
    size_t i = 0;
    for (const ReceivedBucket& b : fake_->received()) {
      for (const v1::TensorSpec& t : b.wire.tensors()) {
        ASSERT_LT(i, ts.size());
        EXPECT_EQ(t.name(), ts[i].name);
        EXPECT_EQ(b.bytes.at(t.name()), ts[i].data) << t.name();
        ++i;
      }
    }
    EXPECT_EQ(i, ts.size());
  }

  std::unique_ptr<FakeTrainer> fake_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
};

TEST(BucketRulesFromProto, UnsetMessageIsNoRule) {
  EXPECT_EQ(BucketRulesFromProto(v1::UpdateStarted().bucket_rules()), BucketRules{});
  EXPECT_EQ(BucketRulesFromProto(ProtoRules(true, 64 << 20)),
            (BucketRules{.one_dtype = true, .close_after_bytes = 64 << 20}));
}

TEST_F(ClientRulesTest, PushStreamKeepsOneDtypePerBucket) {
  Start(ProtoRules(/*one_dtype=*/true, 0));
  const std::vector<OwnedTensor> ts = MixedModel();
  auto push = client_->BeginPush("policy", "v1");
  ASSERT_TRUE(push.ok()) << push.status();
  EXPECT_EQ((*push)->bucket_rules(), BucketRules{.one_dtype = true});
  const std::vector<TensorRef> refs = Refs(ts);
  // Fed in uneven pieces, as a generator would.
  for (size_t i = 0; i < refs.size(); i += 3) {
    std::vector<TensorRef> piece(refs.begin() + i, refs.begin() + std::min(i + 3, refs.size()));
    ASSERT_TRUE((*push)->Add(piece).ok());
  }
  auto result = (*push)->Commit();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->bucket_rules, "one dtype per bucket");

  const std::vector<ReceivedBucket> got = fake_->received();
  auto plan =
      PlanBuckets(Descs(ts), kSlotBytes, /*oversize_alone=*/true, BucketRules{.one_dtype = true});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(Names(got), Names(*plan, ts));
  auto unruled = PlanBuckets(Descs(ts), kSlotBytes, /*oversize_alone=*/true);
  EXPECT_LT(unruled->size(), got.size()) << "the rule should have split some bucket";
  for (const ReceivedBucket& b : got) {
    EXPECT_TRUE(CheckBucketRules(BucketRules{.one_dtype = true}, ManifestOf(b.wire)).ok());
  }
  // The final bucket went out at Commit, when the client knew it was the last.
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].wire.last(), i + 1 == got.size()) << i;
  ExpectDelivered(ts);
}

TEST_F(ClientRulesTest, PushStreamClosesAfterTheTensorThatExceedsTheChunk) {
  constexpr uint64_t kChunk = 1000;
  Start(ProtoRules(/*one_dtype=*/false, kChunk));
  // 400 + 500 + 200 = 1100 passes 1000 at c; 600 + 600 passes it at e, the last tensor added,
  // so the final bucket closes inside Add.
  const std::vector<OwnedTensor> ts = {Make("a", DType::kUint8, 400), Make("b", DType::kUint8, 500),
                                       Make("c", DType::kUint8, 200), Make("d", DType::kUint8, 600),
                                       Make("e", DType::kUint8, 600)};
  auto push = client_->BeginPush("policy", "v1");
  ASSERT_TRUE(push.ok()) << push.status();
  ASSERT_TRUE((*push)->Add(Refs(ts)).ok());
  auto result = (*push)->Commit();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->bucket_rules, "close after 1000 bytes");
  const std::vector<ReceivedBucket> got = fake_->received();
  using Names2 = std::vector<std::vector<std::string>>;
  EXPECT_EQ(Names(got), (Names2{{"a", "b", "c"}, {"d", "e"}}));
  // Without a declared tensor count, each bucket that closed with its tensor waited for the next
  // tensor (then went out unmarked) or for Commit (then marked last): the engine needs no
  // finishing request.
  ASSERT_EQ(got.size(), 2u);
  EXPECT_FALSE(got[0].wire.last());
  EXPECT_TRUE(got[1].wire.last());
  ExpectDelivered(ts);
}

TEST_F(ClientRulesTest, PushStreamMarksAnOversizeTensorAddedLastAsTheLastBucket) {
  Start(ProtoRules(/*one_dtype=*/false, 0));
  const std::vector<OwnedTensor> ts = {Make("a", DType::kFloat32, 10),
                                       Make("huge", DType::kFloat32, 2 * kSlotBytes)};
  auto push = client_->BeginPush("policy", "v1");
  ASSERT_TRUE(push.ok()) << push.status();
  for (const TensorRef& t : Refs(ts)) ASSERT_TRUE((*push)->Add({t}).ok());
  // "a" went out when "huge" arrived (a tensor followed it). "huge" is copied into the oversize
  // slot at once, so both are the caller's again; only its message waits to learn whether it is
  // the last.
  EXPECT_EQ((*push)->released(), 2u);
  auto result = (*push)->Commit();
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<ReceivedBucket> got = fake_->received();
  using Names2 = std::vector<std::vector<std::string>>;
  ASSERT_EQ(Names(got), (Names2{{"a"}, {"huge"}}));
  EXPECT_FALSE(got[0].wire.last());
  EXPECT_TRUE(got[1].wire.last());
  EXPECT_EQ(got[1].wire.slot(), kSlots);
  ExpectDelivered(ts);
}

TEST_F(ClientRulesTest, PushStreamSendsAHeldBucketUnmarkedWhenATensorFollowsIt) {
  Start(ProtoRules(/*one_dtype=*/false, 1000));
  // a + b pass the chunk at b, which ends the bucket; c follows in a later Add and stays open
  // until Commit.
  const std::vector<OwnedTensor> ts = {Make("a", DType::kUint8, 600), Make("b", DType::kUint8, 600),
                                       Make("c", DType::kUint8, 10)};
  auto push = client_->BeginPush("policy", "v1");
  ASSERT_TRUE(push.ok()) << push.status();
  const std::vector<TensorRef> refs = Refs(ts);
  ASSERT_TRUE((*push)->Add({refs[0], refs[1]}).ok());
  ASSERT_TRUE((*push)->Add({refs[2]}).ok());
  auto result = (*push)->Commit();
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<ReceivedBucket> got = fake_->received();
  using Names2 = std::vector<std::vector<std::string>>;
  ASSERT_EQ(Names(got), (Names2{{"a", "b"}, {"c"}}));
  EXPECT_FALSE(got[0].wire.last());
  EXPECT_TRUE(got[1].wire.last());
  ExpectDelivered(ts);
}

TEST_F(ClientRulesTest, PushStreamWithADeclaredCountMarksTheLastBucketEarly) {
  Start(ProtoRules(/*one_dtype=*/false, 1000));
  const std::vector<OwnedTensor> ts = {Make("a", DType::kUint8, 600), Make("b", DType::kUint8, 600),
                                       Make("c", DType::kUint8, 600),
                                       Make("d", DType::kUint8, 600)};
  PushOptions options;
  options.tensors_total = ts.size();
  auto push = client_->BeginPush("policy", "v1", options);
  ASSERT_TRUE(push.ok()) << push.status();
  ASSERT_TRUE((*push)->Add(Refs(ts)).ok());
  // Beyond the declared count: refused, since the last bucket is already marked.
  absl::Status extra = (*push)->Add(Refs({Make("late", DType::kUint8, 1)}));
  EXPECT_EQ(extra.code(), absl::StatusCode::kFailedPrecondition);
  auto result = (*push)->Commit();
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<ReceivedBucket> got = fake_->received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_FALSE(got[0].wire.last());
  EXPECT_TRUE(got[1].wire.last());
}

TEST_F(ClientRulesTest, ACommitShortOfTheDeclaredCountIsRefused) {
  Start(ProtoRules(/*one_dtype=*/false, 1000));
  PushOptions options;
  options.tensors_total = 3;
  auto push = client_->BeginPush("policy", "v1", options);
  ASSERT_TRUE(push.ok()) << push.status();
  ASSERT_TRUE((*push)->Add(Refs({Make("a", DType::kUint8, 600)})).ok());
  // No bucket would be marked last: the commit is refused and the update aborted.
  auto result = (*push)->Commit();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(result.status().message(), HasSubstr("declared to hold 3 tensors; 1 were added"));
}

TEST_F(ClientRulesTest, PushFollowsBothRulesAndMarksItsLastBucket) {
  const BucketRules rules{.one_dtype = true, .close_after_bytes = 1500};
  Start(ProtoRules(rules.one_dtype, rules.close_after_bytes));
  std::vector<OwnedTensor> ts = MixedModel();
  // lm_head (1400 bytes) and tail (2000) pass the chunk at tail, the last tensor, so the final
  // bucket closes before Commit; Push knows the whole list and still marks it.
  ts.push_back(Make("tail", DType::kBfloat16, 1000));
  uint64_t progress_total = 0;
  auto result = client_->Push("policy", "v1", Refs(ts),
                              [&](const PushProgress& p) { progress_total = p.buckets_total; });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->bucket_rules, "one dtype per bucket, close after 1500 bytes");

  const std::vector<ReceivedBucket> got = fake_->received();
  auto plan = PlanBuckets(Descs(ts), kSlotBytes, /*oversize_alone=*/true, rules);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(Names(got), Names(*plan, ts));
  EXPECT_EQ(progress_total, got.size());
  for (const ReceivedBucket& b : got) {
    EXPECT_TRUE(CheckBucketRules(rules, ManifestOf(b.wire)).ok());
    EXPECT_LE(ManifestOf(b.wire).span_bytes(), kSlotBytes);
  }
  ASSERT_FALSE(got.empty());
  const v1::Bucket& final_bucket = got.back().wire;
  EXPECT_EQ(final_bucket.tensors(final_bucket.tensors_size() - 1).name(), "tail");
  EXPECT_GT(ManifestOf(final_bucket).span_bytes(), rules.close_after_bytes);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].wire.last(), i + 1 == got.size()) << i;
  ExpectDelivered(ts);
}

TEST_F(ClientRulesTest, PushStillRefusesAMalformedTensorBeforeBegin) {
  Start(ProtoRules(/*one_dtype=*/true, 0));
  const std::vector<OwnedTensor> ts = {
      Make("a", DType::kUint8, 10), OwnedTensor{"bad", DType::kFloat32, 3, std::string(10, 'x')}};
  auto result = client_->Push("policy", "v1", Refs(ts));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("are not 10 bytes"));
  EXPECT_EQ(fake_->updates(), 0);
}

TEST_F(ClientRulesTest, OversizeTensorTravelsAloneUnderTheRules) {
  Start(ProtoRules(/*one_dtype=*/true, 1000));
  const std::vector<OwnedTensor> ts = {Make("a", DType::kFloat32, 10),
                                       Make("huge", DType::kFloat32, 2 * kSlotBytes),
                                       Make("b", DType::kFloat32, 10)};
  auto result = client_->Push("policy", "v1", Refs(ts));
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<ReceivedBucket> got = fake_->received();
  using Names2 = std::vector<std::vector<std::string>>;
  EXPECT_EQ(Names(got), (Names2{{"a"}, {"huge"}, {"b"}}));
  EXPECT_EQ(got[1].wire.slot(), kSlots);
  EXPECT_TRUE(got[2].wire.last());
  ExpectDelivered(ts);
}

TEST_F(ClientRulesTest, NoRulesPlanAsBefore) {
  Start(v1::BucketRules());
  const std::vector<OwnedTensor> ts = MixedModel();
  auto result = client_->Push("policy", "v1", Refs(ts));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->bucket_rules, "none");
  auto plan = PlanBuckets(Descs(ts), kSlotBytes, /*oversize_alone=*/true);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(Names(fake_->received()), Names(*plan, ts));
  ExpectDelivered(ts);
}

}  // namespace
}  // namespace wsync
