// Pull mode end to end in host mode: shared-memory arenas stand in for the trainer's GPU
// allocations, and wsyncd copies every bucket out of them itself.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <tuple>

#include "common/host/host_source.h"
#include "common/host/shm_region.h"
#include "gmock/gmock.h"
#include "tests/service/service_fixture.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

// A model laid out in one arena.
struct ArenaModel {
  std::unique_ptr<HostSourceArena> arena;
  std::vector<TensorRef> refs;
};

// gap = 2: each tensor at an odd offset after the previous one, so buckets of several tensors
// must be copied; gap = 0: back to back, as in one flat parameter buffer, so every bucket lies in
// the arena exactly as it is laid out and goes out with no copy.
ArenaModel InArena(const Client& client, const std::vector<OwnedTensor>& model, uint64_t gap = 2) {
  uint64_t total = 0;
  for (const auto& t : model) total += t.data.size() + gap + 1;
  ArenaModel out;
  auto arena = client.NewSourceArena(total);
  EXPECT_TRUE(arena.ok()) << arena.status();
  out.arena = std::move(*arena);
  auto* base = static_cast<uint8_t*>(out.arena->data());
  uint64_t at = 1;
  for (const auto& t : model) {
    std::memcpy(base + at, t.data.data(), t.data.size());
    out.refs.push_back({t.name, t.dtype, t.shape, base + at, t.data.size()});
    at += t.data.size() + gap;
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

class PullFixture : public ServiceFixture {
 protected:
  // Pushes `refs` (which hold `model`'s bytes) in pull mode and checks that both engines then
  // hold `model`; nullopt after a failure, already reported.
  std::optional<PushResult> PullAndCheck(const std::string& version,
                                         const std::vector<TensorRef>& refs,
                                         const std::vector<OwnedTensor>& model,
                                         uint64_t* released = nullptr) {
    uint64_t ignored = 0;
    auto result = PullPush(*client_, version, refs, released ? released : &ignored);
    if (!result.ok()) {
      ADD_FAILURE() << version << ": " << result.status();
      return std::nullopt;
    }
    ExpectHolds(*sim_a_.sim, model, version, 1);
    ExpectHolds(*sim_b_.sim, model, version, 2);
    return *result;
  }
};

TEST_F(PullFixture, PullModeCopiesTheTrainersTensorsInsideWsyncd) {
  CreatePolicyGroup();
  for (uint32_t v = 1; v <= 2; ++v) {
    auto model = SmallModel(v);
    ArenaModel in_arena = InArena(*client_, model);
    uint64_t released = 0;
    auto result = PullAndCheck(absl::StrCat("v", v), in_arena.refs, model, &released);
    ASSERT_TRUE(result.has_value());
    EXPECT_GE(result->buckets, 3u);
    EXPECT_EQ(result->buckets_pulled, result->buckets) << "every bucket read by wsyncd";
    EXPECT_EQ(released, model.size());
  }
}

TEST_F(PullFixture, BucketsLaidOutInOneAllocationAsTheyAreSentGoOutWithNoCopy) {
  CreatePolicyGroup();
  auto model = SmallModel(8);
  ArenaModel flat = InArena(*client_, model, /*gap=*/0);
  uint64_t released = 0;
  auto result = PullAndCheck("v8", flat.refs, model, &released);
  ASSERT_TRUE(result.has_value());
  EXPECT_GE(result->buckets, 3u);
  EXPECT_EQ(result->buckets_pulled, result->buckets);
  EXPECT_EQ(result->buckets_read_in_place, result->buckets);
  EXPECT_EQ(released, model.size()) << "every tensor let go once its broadcast was done";
  const std::vector<BroadcastRecord> sent = broadcasts_.records();
  ASSERT_EQ(sent.size(), result->buckets);
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_FALSE(sent[i].from_slot) << "bucket " << i << " was copied into a slot first";
  }
  // With gaps between the tensors, buckets of several tensors are copied into the slot.
  auto next = SmallModel(9);
  ArenaModel gapped = InArena(*client_, next);
  ASSERT_TRUE(PullAndCheck("v9", gapped.refs, next).has_value());
  const std::vector<BroadcastRecord> all = broadcasts_.records();
  size_t copied = 0;
  for (size_t i = sent.size(); i < all.size(); ++i) copied += all[i].from_slot ? 1 : 0;
  EXPECT_GT(copied, 0u);
}

TEST_F(PullFixture, LeftToTheGroupABroadcastPushIsPulledAndMemoryItCannotExportCopied) {
  CreatePolicyGroup();
  auto model = SmallModel(10);
  ArenaModel in_arena = InArena(*client_, model);
  auto heap = SmallModel(11);  // ordinary heap memory: nothing to export
  for (auto [version, refs, expected_pulled] :
       {std::tuple{"g1", in_arena.refs, true}, std::tuple{"g2", Refs(heap), false}}) {
    PushOptions options;
    options.pull_as_group_prefers = true;  // the broadcast transport prefers pull mode
    auto push = client_->BeginPush("policy", version, std::move(options));
    ASSERT_TRUE(push.ok()) << push.status();
    ASSERT_TRUE((*push)->Add(refs).ok());
    auto result = (*push)->Commit();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->buckets_pulled, expected_pulled ? result->buckets : 0u) << version;
    const auto& expected = expected_pulled ? model : heap;
    ExpectHolds(*sim_a_.sim, expected, version, 1);
    ExpectHolds(*sim_b_.sim, expected, version, 2);
  }
}

TEST_F(PullFixture, PullModeCopiesMemoryItCannotExportAsUsual) {
  CreatePolicyGroup();
  auto model = SmallModel(3);  // ordinary heap memory: nothing to export
  auto result = PullAndCheck("v3", Refs(model), model);
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->buckets_pulled, 0u);
}

TEST_F(PullFixture, PullModeCopiesTemporariesItselfSoWsyncdNeverMapsMemoryAboutToBeFreed) {
  // wsyncd's mappings last the session, and freeing memory another process maps is undefined in
  // CUDA: a bucket holding a tensor made for this push only goes through the client's copy.
  CreatePolicyGroup();
  auto model = SmallModel(4);
  ArenaModel in_arena = InArena(*client_, model);
  in_arena.refs.front().temporary = true;
  auto result = PullAndCheck("v4", in_arena.refs, model);
  ASSERT_TRUE(result.has_value());
  EXPECT_GE(result->buckets, 3u);
  EXPECT_EQ(result->buckets_pulled, result->buckets - 1) << "only the temporary's bucket copied";
}

TEST_F(PullFixture, ReleaseSourcesClosesTheMappingsAndTheNextPullMapsAgain) {
  CreatePolicyGroup();
  auto model = SmallModel(5);
  ArenaModel in_arena = InArena(*client_, model);
  ASSERT_TRUE(PullAndCheck("v5", in_arena.refs, model).has_value());
  auto closed = client_->ReleaseSources();
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(*closed, 1u) << "the one arena every tensor lives in";
  closed = client_->ReleaseSources();
  ASSERT_TRUE(closed.ok()) << closed.status();
  EXPECT_EQ(*closed, 0u);
  // The trainer may now free or reuse the memory; the next pull update maps what it names again.
  auto next = SmallModel(6);
  ArenaModel next_arena = InArena(*client_, next);
  auto result = PullAndCheck("v6", next_arena.refs, next);
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->buckets_pulled, result->buckets);
}

TEST_F(PullFixture, ReleaseSourcesIsRefusedWhileAnUpdateOfTheSessionRuns) {
  CreatePolicyGroup();
  auto model = SmallModel(7);
  ArenaModel in_arena = InArena(*client_, model);
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

// A trainer that truncates a pull source after wsyncd mapped it. wsyncd's copy out of it runs under
// a fault guard; read in place, wsyncd checks its size before the broadcast would read it. Either
// way the update fails with DATA_LOSS naming the source, nothing reaches an engine, and the next
// update works.
TEST_F(PullFixture, ATrainerThatTruncatesAPullSourceFailsItsUpdateAndTheNextOneWorks) {
  CreatePolicyGroup();
  uint32_t version = 1;
  for (const uint64_t gap : {uint64_t{2}, uint64_t{0}}) {
    SCOPED_TRACE(gap == 0 ? "read in place" : "copied");
    auto model = SmallModel(version);
    ArenaModel in_arena = InArena(*client_, model, gap);
    ASSERT_TRUE(PullAndCheck(absl::StrCat("v", version), in_arena.refs, model).has_value());
    const std::string name = in_arena.arena->name();
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 0), 0);
    ::close(fd);
    const int received = TotalUpdatesReceived();
    const size_t broadcasts = broadcasts_.records().size();

    uint64_t released = 0;
    auto result = PullPush(*client_, "bad", in_arena.refs, &released);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
    EXPECT_THAT(std::string(result.status().message()),
                HasSubstr(absl::StrCat("pull source ", name, " shrank under wsyncd to 0 of the ",
                                       in_arena.arena->bytes(), " bytes")));
    EXPECT_THAT(std::string(result.status().message()),
                HasSubstr(absl::StrCat("of session ", client_->session_id())));
    if (gap != 0) {
      EXPECT_THAT(std::string(result.status().message()),
                  HasSubstr("copying the trainer's tensors into slot"));
    }
    EXPECT_EQ(TotalUpdatesReceived(), received) << "bytes of the bad bucket reached an engine";
    EXPECT_EQ(broadcasts_.records().size(), broadcasts) << "the bad bucket was handed to the wire";
    ExpectHolds(*sim_a_.sim, model, absl::StrCat("v", version), 1);
    ExpectHolds(*sim_b_.sim, model, absl::StrCat("v", version), 2);

    ++version;
    auto next = SmallModel(version);
    ArenaModel fresh = InArena(*client_, next, gap);
    ASSERT_TRUE(PullAndCheck(absl::StrCat("v", version), fresh.refs, next).has_value());
    ++version;
  }
}

// One hand-made pull bucket: a 64-byte tensor from allocation 7, announced as `handle`.
v1::Bucket PullBucketFrom(const std::string& handle) {
  v1::Bucket b;
  b.set_slot(0);
  *b.add_tensors() = Spec("a", "uint8", {64}, 0, 64);
  v1::SourceAllocation* a = b.add_allocations();
  a->set_id(7);
  a->set_handle(handle);
  a->set_bytes(4096);
  v1::TensorSource* s = b.add_sources();
  s->set_allocation(7);
  s->set_offset(0);
  return b;
}

// A path under /dev/shm for a shared-memory name.
std::string ShmPath(const std::string& name) { return "/dev/shm" + name; }

// A session may only have wsyncd read memory its own client made. A pull source's name must carry
// the session's tag (from its OpenSession reply), and the segment must be a regular file of
// wsyncd's uid with one name, not reached through a symbolic link. Anything else is
// PERMISSION_DENIED naming the source, before any byte moves.
TEST_F(PullFixture, APullSourceTheSessionsOwnClientDidNotMakeIsRefused) {
  CreatePolicyGroup();
  // Another trainer's session (on device 1), its slots and an arena of its own.
  v1::OpenSessionRequest open;
  open.set_device(1);
  open.set_client_name("another trainer");
  v1::OpenSessionResponse other;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(client_->trainer()->OpenSession(&ctx, open, &other).ok());
  }
  ASSERT_NE(other.source_tag(), client_->source_tag());
  auto other_arena = HostSourceArena::Create(other.source_tag(), 4096);
  ASSERT_TRUE(other_arena.ok()) << other_arena.status();
  const std::string other_slot = other.slots(0).memory_handle();
  // Segments and files that carry this session's tag but are not a segment of its own.
  const std::string own = absl::StrCat("/wsync-", ::getpid(), "-src-", client_->source_tag(), "-");
  const std::string foreign = absl::StrCat("/wsync-test-foreign-", ::getpid());
  const std::string hard_link = own + "900001";
  const std::string symbolic_link = own + "900002";
  const std::string fifo = own + "900003";
  const std::string strangers = own + "900004";
  std::vector<std::string> made = {foreign, hard_link, symbolic_link, fifo};
  auto segment = CreateShm(foreign, 4096);
  ASSERT_TRUE(segment.ok()) << segment.status();
  ::munmap(segment->data, 4096);
  ASSERT_EQ(::link(ShmPath(other_slot).c_str(), ShmPath(hard_link).c_str()), 0);
  ASSERT_EQ(::symlink(ShmPath(other_slot).c_str(), ShmPath(symbolic_link).c_str()), 0);
  ASSERT_EQ(::mkfifo(ShmPath(fifo).c_str(), 0600), 0);
  struct Case {
    std::string label;
    std::string handle;
    std::string message;
  };
  std::vector<Case> cases = {
      {"another session's slot", other_slot, "was not made by this session's client"},
      {"another session's source", (*other_arena)->name(), "was not made by this session's client"},
      {"any file in /dev/shm", foreign, "was not made by this session's client"},
      {"a path out of /dev/shm", own + "1/../../../etc/passwd",
       "was not made by this session's client"},
      {"a second name of a slot", hard_link, hard_link + " has 2 names"},
      {"a symbolic link to a slot", symbolic_link, symbolic_link + " is a symbolic link"},
      {"a FIFO", fifo, fifo + " is not a regular file"},
  };
  if (::geteuid() == 0) {
    auto theirs = CreateShm(strangers, 4096);
    ASSERT_TRUE(theirs.ok()) << theirs.status();
    ::munmap(theirs->data, 4096);
    ASSERT_EQ(::fchown(theirs->fd.get(), 65534, 65534), 0);
    made.push_back(strangers);
    cases.push_back({"another uid's segment", strangers, strangers + " is owned by uid 65534"});
  }
  for (const Case& c : cases) {
    const int before = TotalUpdatesReceived();
    absl::Status s = SendRawBucket(*client_, PullBucketFrom(c.handle));
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << c.label << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("trainer allocation 7 (4096 bytes) refused"))
        << c.label;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.label;
    EXPECT_EQ(TotalUpdatesReceived(), before) << c.label << ": bytes reached an engine";
    EXPECT_EQ(GetGroup("policy").state(), v1::GROUP_STATE_READY) << c.label;
  }
  for (const std::string& name : made) ::unlink(ShmPath(name).c_str());
  // The session's own arenas are read as before.
  auto model = SmallModel(6);
  ArenaModel in_arena = InArena(*client_, model);
  EXPECT_TRUE(PullAndCheck("v6", in_arena.refs, model).has_value());
}

TEST_F(PullFixture, PullBucketsNamingBadSourcesAreRefusedBeforeAnyByteMoves) {
  CreatePolicyGroup();
  auto arena = client_->NewSourceArena(4096);
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
      {"not mappable",
       bucket(4096, absl::StrCat("/wsync-", ::getpid(), "-src-", client_->source_tag(), "-999999"),
              7, 0, 1),
       "cannot be mapped"},
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
  ArenaModel in_arena = InArena(*client_, model);
  EXPECT_TRUE(PullAndCheck("v4", in_arena.refs, model).has_value());
}

}  // namespace
}  // namespace wsync
