// A group's bucket rules, end to end: the engines' adapters declare them, wsyncd sends them in
// UpdateStarted, the client's planner obeys them, and wsyncd refuses a bucket that breaks them
// before any byte reaches an engine. The real daemon and client in process, with fake engines
// (tests/fakes) whose adapters demand one dtype per bucket.
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/cpp/client.h"
#include "client/cpp/update_stream.h"
#include "common/checksum.h"
#include "common/host/host_platform.h"
#include "daemon/core/daemon_core.h"
#include "daemon/service/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_transport.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

class BucketRulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BucketRules rules;
    rules.one_dtype = true;
    DaemonOptions options;
    options.slot_bytes = 1 << 16;
    options.slots_per_device = 2;
    options.engine_networks = *NetworkAllowList::Parse({"fake"});
    core_ = std::make_unique<DaemonCore>(
        std::make_unique<HostPlatform>("127.0.0.1", "127.0.0.1"), options,
        FakeGroupFactories(cluster_, FakeCapabilities{"broadcast", rules}));
    ASSERT_TRUE(core_->CreateGroup(FakeGroupSpec("policy", {"http://fake:1"})).ok());
    auto server = DaemonServer::Start(core_.get(), ServerOptions{});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = Client::FromChannel(server_->InProcessChannel());
    ASSERT_TRUE(client_->OpenSession(0, "rules test").ok());
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    core_.reset();
  }
  FakeEngine& engine() { return *cluster_->Engine("http://fake:1"); }

  std::shared_ptr<FakeCluster> cluster_ = std::make_shared<FakeCluster>();
  std::unique_ptr<DaemonCore> core_;
  std::unique_ptr<DaemonServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(BucketRulesTest, TheClientPlansOneDtypePerBucketAndTheUpdateSucceeds) {
  // Small tensors of alternating dtypes: without the rule they would share buckets.
  std::vector<std::vector<char>> data;
  std::vector<TensorRef> refs;
  const DType dtypes[] = {DType::kBfloat16, DType::kFloat32, DType::kFloat32, DType::kInt64,
                          DType::kBfloat16};
  for (int i = 0; i < 5; ++i) {
    data.emplace_back(256, static_cast<char>(i + 1));
    const uint64_t item = DTypeSize(dtypes[i]);
    refs.push_back(TensorRef{absl::StrCat("t", i),
                             dtypes[i],
                             {static_cast<int64_t>(256 / item)},
                             data.back().data(),
                             256});
  }
  auto result = client_->Push("policy", "v1", refs);
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<FakeBucket> got = engine().buckets();
  ASSERT_EQ(got.size(), 4u) << "bf16 | f32 f32 | i64 | bf16";
  size_t tensors = 0;
  for (const FakeBucket& b : got) {
    for (DType d : b.dtypes) EXPECT_EQ(d, b.dtypes.front()) << "one dtype per bucket";
    tensors += b.names.size();
  }
  EXPECT_EQ(tensors, 5u);
  EXPECT_EQ(got[1].names, (std::vector<std::string>{"t1", "t2"}));
  EXPECT_EQ(got[1].payloads[0], std::string(512, '\2').replace(256, 256, 256, '\3'));
  EXPECT_TRUE(got.back().context.last) << "the client knew its last bucket";
}

TEST_F(BucketRulesTest, ABucketBreakingTheRuleIsRefusedBeforeAnyByteMoves) {
  // A client that ignores the rules, at the wire level.
  UpdateStream stream(client_->trainer(), absl::Seconds(10));
  auto started = stream.Begin(client_->session_id(), "policy", "v1");
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_TRUE(started->bucket_rules().one_dtype()) << "the group's rules reach the client";
  v1::Bucket bucket;
  bucket.set_slot(0);
  auto* a = bucket.add_tensors();
  a->set_name("w");
  a->set_dtype("bfloat16");
  a->add_shape(4);
  a->set_offset(0);
  a->set_length(8);
  auto* b = bucket.add_tensors();
  b->set_name("b");
  b->set_dtype("float32");
  b->add_shape(2);
  b->set_offset(8);
  b->set_length(8);
  const std::string zeros(16, '\0');
  bucket.set_checksum(Crc32(zeros.data(), zeros.size()));
  // Reads and writes on separate threads, as any bidi client must: the refusal may come while the
  // client is still writing.
  std::thread writer([&] {
    stream.SendBucket(bucket);
    stream.Commit();
  });
  v1::UpdateEvent event;
  while (stream.Next(&event)) {
  }
  writer.join();
  absl::Status status = stream.Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("'b'"));
  EXPECT_TRUE(engine().buckets().empty()) << "no byte of a refused bucket reaches an engine";
}

}  // namespace
}  // namespace wsync
