// wsyncd stopping on SIGTERM with an update running: its drain is final. An operator's Undrain
// is refused (it would take updates that the exit then cuts), the running update commits, and a
// new one is refused until wsyncd exits.

#include <signal.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/reliability/real_cluster.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST(StopTest, UndrainIsRefusedAfterSigtermAndTheRunningUpdateCommits) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/wsync-stop-", ::getpid());
  RealCluster cluster(ClusterOptions{
      .wsyncd_bin = WSYNCD_BIN, .dir = dir, .bucket_timeout_s = 10, .extra_flags = {}});
  ASSERT_TRUE(cluster.Start().ok()) << cluster.DaemonLog();
  auto trainer = cluster.Connect();
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->OpenSession(0, "stopping").ok());
  // The engines take 300 ms a bucket, so the update still runs when the signal comes.
  for (int e = 0; e < RealCluster::kEngines; ++e) {
    ASSERT_TRUE(cluster.SetKnobs(e, {{"answer_delay_ms", 300}}).ok());
  }
  const std::vector<OwnedTensor> model = SmallModel(3);
  absl::StatusOr<PushResult> pushed = absl::UnknownError("not pushed");
  std::thread push([&] { pushed = (*trainer)->Push("policy", "v-stop", Refs(model)); });
  auto draining = [&]() -> absl::StatusOr<bool> {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::DaemonStatus status;
    grpc::Status s = cluster.admin().admin()->GetStatus(&ctx, v1::GetStatusRequest(), &status);
    if (!s.ok()) return absl::UnavailableError(s.error_message());
    return status.draining();
  };
  bool running = false;
  for (int i = 0; i < 500 && !running; ++i) {
    auto updates = cluster.Updates();
    for (const v1::UpdateRecord& u : updates.ok() ? *updates : std::vector<v1::UpdateRecord>()) {
      running = running || (u.version() == "v-stop" && u.state() == "running");
    }
    if (!running) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(running) << cluster.DaemonLog();
  cluster.daemon().Signal(SIGTERM);
  for (int i = 0; i < 200; ++i) {
    auto d = draining();
    if (d.ok() && *d) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  grpc::ClientContext ctx;
  v1::UndrainResponse undrained;
  const grpc::Status undrain =
      cluster.admin().admin()->Undrain(&ctx, v1::UndrainRequest(), &undrained);
  EXPECT_EQ(undrain.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << "Undrain answered " << undrain.error_message() << " (was draining "
      << undrained.was_draining() << ")";
  EXPECT_THAT(undrain.error_message(), HasSubstr("wsyncd is stopping (it got signal 15)"));
  auto still = draining();
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_TRUE(*still);
  // No new update is taken: another trainer's session is refused while the drain lasts.
  auto late = cluster.Connect();
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE((*late)->OpenSession(1, "too late").ok());
  push.join();
  EXPECT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_TRUE(cluster.EnginesHold(model, "v-stop").ok());
  trainer->reset();
  late->reset();
  EXPECT_EQ(cluster.daemon().Wait(absl::Seconds(40)), 0) << cluster.DaemonLog();
}

}  // namespace
}  // namespace wsync
