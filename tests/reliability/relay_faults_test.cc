// The node relay's faults, rows of the fault matrix (fault_matrix_test.cc prints the table):
// three host-mode wsyncds on loopback, an upstream and two downstreams (a 2 s bucket deadline),
// each downstream's engine taking 40 ms per bucket so that an update (12 buckets) lasts long
// enough to be cut. Each fault is injected kFaultRounds times; after each, the daemons the fault
// did not target are up, the next update commits on every member with every engine holding it,
// and the daemon that stayed up through every round holds no more threads, descriptors,
// mappings or shared memory after the last round than after the first.

#include <signal.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/reliability/fault_rows.h"
#include "tests/reliability/relay_cluster.h"

namespace wsync {
namespace {

// 12 float32 tensors of 800 KB: one per 1 MiB bucket, so a kill lands mid-update.
std::vector<OwnedTensor> BigModel(uint32_t seed) {
  std::vector<OwnedTensor> out;
  for (int i = 0; i < 12; ++i) {
    OwnedTensor t{absl::StrCat("model.layers.", i, ".weight"), DType::kFloat32, {200000}, {}};
    t.data.resize(800000);
    for (size_t k = 0; k < t.data.size(); ++k) {
      t.data[k] = static_cast<uint8_t>(k * 131 + seed * 17 + i * 7 + (k >> 12));
    }
    out.push_back(std::move(t));
  }
  return out;
}

// A trainer that hands over a tensor every 50 ms (a bucket each): the update stays open while it
// pushes, so a fault of the upstream lands with buckets still to come.
absl::StatusOr<PushResult> SlowPush(Client& client, const std::string& version,
                                    const std::vector<OwnedTensor>& model) {
  PushOptions options;
  options.tensors_total = model.size();
  auto push = client.BeginPush("policy", version, options);
  if (!push.ok()) return push.status();
  // The references point into `model`, which outlives the push: a bucket is copied when the
  // next tensor closes it, after Add returned.
  for (const TensorRef& ref : Refs(model)) {
    absl::SleepFor(absl::Milliseconds(50));
    if (absl::Status s = (*push)->Add({ref}); !s.ok()) return s;
  }
  return (*push)->Commit();
}

const EngineResultView* Member(const PushResult& result, const std::string& node) {
  for (const EngineResultView& e : result.engines) {
    if (e.engine == "wsyncd://" + node) return &e;
  }
  return nullptr;
}

class RelayFaultMatrix : public ::testing::Test {
 protected:
  // The relay with `quorum`, two versions pushed through it; the second one's time is the
  // undisturbed time of an update.
  void StartRelay(int quorum) {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    cluster_ = std::make_unique<RelayCluster>(RelayClusterOptions{
        .wsyncd_bin = WSYNCD_BIN,
        .dir = absl::StrCat(::testing::TempDir(), "/wsync-relay-faults-", ::getpid(), "-", name),
        .downstreams = 2,
        .quorum = quorum,
        .bucket_timeout_s = kBucketTimeoutS,
        .engine_flags = {"--answer-delay-ms", "40"},
    });
    const absl::Status started = cluster_->Start();
    ASSERT_TRUE(started.ok()) << started << "\n" << cluster_->UpstreamLog();
    ASSERT_TRUE(OpenClient());
    for (uint32_t v : {1, 2}) {
      whole_ = BigModel(v);
      const absl::Time t0 = absl::Now();
      const absl::Status s =
          cluster_->PushUntilAllCommit(*client_, absl::StrCat("warm", v), whole_);
      ASSERT_TRUE(s.ok()) << s << "\n" << cluster_->UpstreamLog();
      undisturbed_s_ = absl::ToDoubleSeconds(absl::Now() - t0);
    }
    row_.fault = name;
  }

  bool OpenClient() {
    auto client = cluster_->Connect();
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return false;
    client_ = std::move(*client);
    const absl::Status s = client_->OpenSession(0, "relay fault matrix");
    EXPECT_TRUE(s.ok()) << s;
    return s.ok();
  }

  // After a round's fault: the next version through every member, then the leak sample of the
  // daemon `pid` that stayed up (the first round's is the base).
  void NextUpdate(int round, int pid) {
    std::vector<OwnedTensor> next = BigModel(20 + round);
    const absl::Status s =
        cluster_->PushUntilAllCommit(*client_, absl::StrCat("next", round), next);
    row_.next_update_ok = row_.next_update_ok && s.ok();
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s << "\n" << cluster_->UpstreamLog();
    whole_ = std::move(next);
    if (round == 1) first_ = IdleResources(pid);
    if (round == kFaultRounds) {
      const ProcessResources last = SettledResources(pid, first_, kNoLeak);
      row_.leaks = LeaksBetween(first_, last, kNoLeak);
      EXPECT_EQ(row_.leaks, "none") << "after round 1: " << first_.Describe() << "; after round "
                                    << kFaultRounds << ": " << last.Describe();
    }
  }

  void Detected(double seconds, const std::string& as) {
    if (seconds > row_.detection_s) {
      row_.detection_s = seconds;
      row_.detected_as = as;
    }
  }

  // Runs `fault` on a thread once downstream `i`'s engine has loaded 3 buckets more than it had;
  // returns the moment it ran.
  std::thread AfterThreeBuckets(int i, std::function<void()> fault, absl::Time* at) {
    auto before = cluster_->EngineUpdates(i);
    EXPECT_TRUE(before.ok()) << before.status();
    const int want = before.value_or(0) + 3;
    return std::thread([this, i, want, fault = std::move(fault), at] {
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      while (cluster_->EngineUpdates(i).value_or(0) < want && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      *at = absl::Now();
      fault();
    });
  }

  void TearDown() override {
    if (!row_.fault.empty()) FaultRows().push_back(row_);
    client_.reset();
    cluster_.reset();
  }

  static constexpr int kBucketTimeoutS = 2;
  std::unique_ptr<RelayCluster> cluster_;
  std::unique_ptr<Client> client_;
  std::vector<OwnedTensor> whole_;  // the version every engine holds whole
  double undisturbed_s_ = 0;
  ProcessResources first_;
  FaultRow row_;
};

// A member that dies or stalls mid-update is dropped at the bucket deadline and the update
// commits on the quorum (1 of 2); its engine, which took part of the version, waits paused;
// back, it subscribes again (or is formed again) and takes the next version whole.
class RelayMemberFaults : public RelayFaultMatrix {
 protected:
  void Cut(int round, int sig) {
    const std::vector<OwnedTensor> before = whole_;
    const std::vector<OwnedTensor> cut = BigModel(10 + round);
    const std::string subscribed_as = cluster_->SubscriberId(1);
    absl::Time injected;
    std::thread fault = AfterThreeBuckets(
        1, [&] { cluster_->KillDownstream(1, sig); }, &injected);
    const absl::Time t0 = absl::Now();
    auto pushed = client_->Push("policy", absl::StrCat("cut", round), Refs(cut));
    const absl::Time done = absl::Now();
    fault.join();
    if (sig == SIGSTOP) cluster_->KillDownstream(1, SIGCONT);
    ASSERT_TRUE(pushed.ok()) << pushed.status() << "\n" << cluster_->UpstreamLog();
    const EngineResultView* b = Member(*pushed, "node-b");
    const EngineResultView* c = Member(*pushed, "node-c");
    ASSERT_TRUE(b != nullptr && c != nullptr);
    EXPECT_TRUE(b->status.ok()) << b->status;
    EXPECT_FALSE(c->status.ok()) << "node-c's fault went unnoticed";
    const double took = absl::ToDoubleSeconds(done - t0);
    EXPECT_LT(took, undisturbed_s_ + kBucketTimeoutS + 1)
        << "the quorum's commit waited past the update's undisturbed time (" << undisturbed_s_
        << " s) + the bucket deadline + 1 s";
    Detected(
        absl::ToDoubleSeconds(done - injected),
        absl::StrCat(c->status.ToString().substr(0, 110), " (", absl::StrFormat("%.2f", took),
                     " s in all, undisturbed ", absl::StrFormat("%.2f", undisturbed_s_), " s)"));
    const absl::Status holds = cluster_->EngineHolds(0, cut, absl::StrCat("cut", round));
    EXPECT_TRUE(holds.ok()) << holds;
    const absl::Status held = cluster_->EngineServesNoMix(1, {before, cut});
    EXPECT_TRUE(held.ok()) << held;
    if (sig == SIGKILL) {
      const absl::Status s = cluster_->StartDownstream(1);
      ASSERT_TRUE(s.ok()) << s;
    }
    // Subscribed again: the fault ended the subscription it had.
    const absl::Status subscribed = cluster_->WaitSubscribed(1, subscribed_as);
    ASSERT_TRUE(subscribed.ok()) << subscribed;
    const bool up = cluster_->UpstreamUp() && cluster_->DownstreamUp(0);
    row_.daemon_up = row_.daemon_up && up;
    ASSERT_TRUE(up) << cluster_->UpstreamLog();
  }
};

TEST_F(RelayMemberFaults, RelayDownstreamKilledMidUpdate) {
  StartRelay(/*quorum=*/1);
  for (int round = 1; round <= kFaultRounds; ++round) {
    Cut(round, SIGKILL);
    if (HasFatalFailure()) return;
    NextUpdate(round, cluster_->upstream_pid());
    if (HasFatalFailure()) return;
  }
}

TEST_F(RelayMemberFaults, RelayDownstreamStallsMidUpdate) {
  StartRelay(/*quorum=*/1);
  for (int round = 1; round <= kFaultRounds; ++round) {
    Cut(round, SIGSTOP);
    if (HasFatalFailure()) return;
    NextUpdate(round, cluster_->upstream_pid());
    if (HasFatalFailure()) return;
  }
}

// The upstream killed mid-update: every downstream hears its stream end and aborts its local
// update at once; each engine, which took part of the version, waits paused.
// The upstream back on its port: both subscribe again and the next version lands whole.
TEST_F(RelayFaultMatrix, RelayUpstreamKilledMidUpdate) {
  StartRelay(/*quorum=*/0);
  for (int round = 1; round <= kFaultRounds; ++round) {
    const std::vector<OwnedTensor> before = whole_;
    const std::vector<OwnedTensor> cut = BigModel(10 + round);
    absl::Time injected;
    std::thread fault = AfterThreeBuckets(
        0, [&] { cluster_->KillUpstream(SIGKILL); }, &injected);
    auto pushed = SlowPush(*client_, absl::StrCat("cut", round), cut);
    fault.join();
    EXPECT_FALSE(pushed.ok()) << "the push outlived its wsyncd";
    // Both downstreams end their local update within the bucket deadline + 1 s.
    const absl::Time deadline = injected + absl::Seconds(kBucketTimeoutS + 1);
    double slowest = 0;
    for (int i = 0; i < 2; ++i) {
      for (;;) {
        auto state = cluster_->DownstreamGroupState(i);
        if (state.ok() && *state != v1::GROUP_STATE_UPDATING) break;
        ASSERT_LT(absl::Now(), deadline) << RelayCluster::Node(i) << "'s update is still open\n"
                                         << cluster_->DownstreamLog(i);
        absl::SleepFor(absl::Milliseconds(20));
      }
      slowest = std::max(slowest, absl::ToDoubleSeconds(absl::Now() - injected));
      const absl::Status held = cluster_->EngineServesNoMix(i, {before, cut});
      EXPECT_TRUE(held.ok()) << held;
    }
    Detected(slowest, "each downstream aborted its local update; no engine serves a mix");
    const bool up = cluster_->DownstreamUp(0) && cluster_->DownstreamUp(1);
    row_.daemon_up = row_.daemon_up && up;
    ASSERT_TRUE(up);
    client_.reset();
    const absl::Status restarted = cluster_->StartUpstream();
    ASSERT_TRUE(restarted.ok()) << restarted;
    for (int i = 0; i < 2; ++i) {
      const absl::Status s = cluster_->WaitSubscribed(i);
      ASSERT_TRUE(s.ok()) << s;
    }
    ASSERT_TRUE(OpenClient());
    NextUpdate(round, cluster_->downstream_pid(0));
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace wsync
