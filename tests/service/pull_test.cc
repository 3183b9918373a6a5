// Pull mode end to end in host mode: shared-memory arenas stand in for the trainer's GPU
// allocations, and wsyncd copies every bucket out of them itself.

#include <cstring>

#include "common/host/host_source.h"
#include "gmock/gmock.h"
#include "tests/service/service_fixture.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

// A model laid out in one arena, each tensor at an odd offset after the previous one.
struct ArenaModel {
  std::unique_ptr<HostSourceArena> arena;
  std::vector<TensorRef> refs;
};

ArenaModel InArena(const std::vector<OwnedTensor>& model) {
  uint64_t total = 0;
  for (const auto& t : model) total += t.data.size() + 3;
  ArenaModel out;
  auto arena = HostSourceArena::Create(total);
  EXPECT_TRUE(arena.ok()) << arena.status();
  out.arena = std::move(*arena);
  auto* base = static_cast<uint8_t*>(out.arena->data());
  uint64_t at = 1;
  for (const auto& t : model) {
    std::memcpy(base + at, t.data.data(), t.data.size());
    out.refs.push_back({t.name, t.dtype, t.shape, base + at, t.data.size()});
    at += t.data.size() + 2;
  }
  return out;
}

absl::StatusOr<PushResult> PullPush(Client& client, const std::string& version,
                                    const std::vector<TensorRef>& refs, uint64_t* released) {
  PushOptions options;
  options.pull = true;
  auto push = client.BeginPush("policy", version, std::move(options));
  if (!push.ok()) return push.status();
  if (absl::Status s = (*push)->Add(refs); !s.ok()) return s;
  auto result = (*push)->Commit();
  *released = (*push)->released();
  return result;
}

TEST_F(ServiceFixture, PullModeCopiesTheTrainersTensorsInsideWsyncd) {
  CreatePolicyGroup();
  for (uint32_t v = 1; v <= 2; ++v) {
    auto model = SmallModel(v);
    ArenaModel in_arena = InArena(model);
    uint64_t released = 0;
    auto result = PullPush(*client_, absl::StrCat("v", v), in_arena.refs, &released);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_GE(result->buckets, 3u);
    EXPECT_EQ(result->buckets_pulled, result->buckets) << "every bucket read by wsyncd";
    EXPECT_EQ(released, model.size());
    ExpectHolds(*sim_a_.sim, model, absl::StrCat("v", v), 1);
    ExpectHolds(*sim_b_.sim, model, absl::StrCat("v", v), 2);
  }
}

TEST_F(ServiceFixture, PullModeCopiesMemoryItCannotExportAsUsual) {
  CreatePolicyGroup();
  auto model = SmallModel(3);  // ordinary heap memory: nothing to export
  uint64_t released = 0;
  auto result = PullPush(*client_, "v3", Refs(model), &released);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->buckets_pulled, 0u);
  ExpectHolds(*sim_a_.sim, model, "v3", 1);
  ExpectHolds(*sim_b_.sim, model, "v3", 2);
}

TEST_F(ServiceFixture, PullModeCopiesTemporariesItselfSoWsyncdNeverMapsMemoryAboutToBeFreed) {
  // wsyncd's mappings last the session, and freeing memory another process maps is undefined in
  // CUDA: a bucket holding a tensor made for this push only goes through the client's copy.
  CreatePolicyGroup();
  auto model = SmallModel(4);
  ArenaModel in_arena = InArena(model);
  in_arena.refs.front().temporary = true;
  uint64_t released = 0;
  auto result = PullPush(*client_, "v4", in_arena.refs, &released);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GE(result->buckets, 3u);
  EXPECT_EQ(result->buckets_pulled, result->buckets - 1) << "only the temporary's bucket copied";
  ExpectHolds(*sim_a_.sim, model, "v4", 1);
  ExpectHolds(*sim_b_.sim, model, "v4", 2);
}

TEST_F(ServiceFixture, ReleaseSourcesClosesTheMappingsAndTheNextPullMapsAgain) {
  CreatePolicyGroup();
  auto model = SmallModel(5);
  ArenaModel in_arena = InArena(model);
  uint64_t released = 0;
  ASSERT_TRUE(PullPush(*client_, "v5", in_arena.refs, &released).ok());
  auto closed = client_->ReleaseSources();
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(*closed, 1u) << "the one arena every tensor lives in";
  closed = client_->ReleaseSources();
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(*closed, 0u);
  // The trainer may now free or reuse the memory; the next pull update maps what it names again.
  auto next = SmallModel(6);
  ArenaModel next_arena = InArena(next);
  auto result = PullPush(*client_, "v6", next_arena.refs, &released);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->buckets_pulled, result->buckets);
  ExpectHolds(*sim_a_.sim, next, "v6", 1);
  ExpectHolds(*sim_b_.sim, next, "v6", 2);
}

TEST_F(ServiceFixture, ReleaseSourcesIsRefusedWhileAnUpdateOfTheSessionRuns) {
  CreatePolicyGroup();
  auto model = SmallModel(7);
  ArenaModel in_arena = InArena(model);
  PushOptions options;
  options.pull = true;
  auto push = client_->BeginPush("policy", "v7", std::move(options));
  ASSERT_TRUE(push.ok()) << push.status();
  ASSERT_TRUE((*push)->Add({in_arena.refs.front()}).ok());
  auto closed = client_->ReleaseSources();
  EXPECT_EQ(closed.status().code(), absl::StatusCode::kFailedPrecondition) << closed.status();
  EXPECT_THAT(std::string(closed.status().message()), HasSubstr("update of this session"));
  (*push)->Abort("test done");
  closed = client_->ReleaseSources();
  EXPECT_TRUE(closed.ok()) << closed.status();
}

TEST_F(ServiceFixture, PullBucketsNamingBadSourcesAreRefusedBeforeAnyByteMoves) {
  CreatePolicyGroup();
  auto arena = HostSourceArena::Create(4096);
  ASSERT_TRUE(arena.ok());
  auto bucket = [&](uint64_t announce_bytes, std::string handle, uint64_t allocation,
                    uint64_t offset, int sources) {
    v1::Bucket b;
    b.set_slot(0);
    *b.add_tensors() = Spec("a", "uint8", {64}, 0, 64);
    if (announce_bytes > 0) {
      v1::SourceAllocation* a = b.add_allocations();
      a->set_id(7);
      a->set_handle(handle);
      a->set_bytes(announce_bytes);
    }
    for (int i = 0; i < sources; ++i) {
      v1::TensorSource* s = b.add_sources();
      s->set_allocation(allocation);
      s->set_offset(offset);
    }
    return b;
  };
  const std::string name = (*arena)->name();
  struct Case {
    std::string label;
    v1::Bucket bucket;
    std::string message;
  };
  std::vector<Case> cases = {
      {"never announced", bucket(0, "", 7, 0, 1), "which was never announced"},
      {"past the allocation", bucket(4096, name, 7, 4090, 1), "runs past allocation 7"},
      {"not mappable", bucket(4096, "/wsync-no-such-arena", 7, 0, 1), "cannot be mapped"},
      {"larger than announced memory", bucket(1 << 20, name, 7, 0, 1), "cannot be mapped"},
      {"sources per tensor", bucket(4096, name, 7, 0, 2), "2 sources for 1 tensors"},
  };
  for (const Case& c : cases) {
    const int before = TotalUpdatesReceived();
    absl::Status s = SendRawBucket(*client_, c.bucket);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.label << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.label;
    EXPECT_EQ(TotalUpdatesReceived(), before) << c.label << ": bytes reached an engine";
    EXPECT_EQ(GetGroup("policy").state(), v1::GROUP_STATE_READY) << c.label;
  }
  // The daemon keeps serving pull updates.
  auto model = SmallModel(4);
  ArenaModel in_arena = InArena(model);
  uint64_t released = 0;
  auto result = PullPush(*client_, "v4", in_arena.refs, &released);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectHolds(*sim_b_.sim, model, "v4", 2);
}

}  // namespace
}  // namespace wsync
