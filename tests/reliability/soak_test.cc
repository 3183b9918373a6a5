// The soak: N updates (WSYNC_SOAK_UPDATES, 200 by default; docs/RELIABILITY.md has a documented
// run of 1,000) through a real host-mode wsyncd into two SGLang simulator processes (3 engine
// ranks), each update a new version of a ~3.8 MiB model in 1 MiB slots (5 buckets, one of them
// through the oversize slot), and every rank's bytes checked after each one. Every 25 updates
// the trainer closes its session and connects again, and every 10 an operator reads the admin
// views, so sessions, connections and history are soaked too. wsyncd's threads, descriptors,
// mappings, shared memory and resident memory are sampled after every update; after a warm-up (the
// first tenth, at least 10 updates) they must stay flat: a leak of one descriptor or mapping per
// update would show as hundreds. WSYNC_SOAK_CSV names a file for every sample.

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/reliability/process_resources.h"
#include "tests/reliability/real_cluster.h"
#include "tests/reliability/test_models.h"

namespace wsync {
namespace {

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  int n = 0;
  return v != nullptr && absl::SimpleAtoi(v, &n) && n > 0 ? n : fallback;
}

// After the warm-up, sampled right after each update: descriptors, shared memory and mappings
// of files must not move at all; threads may differ by what gRPC's server thread pool does
// around a call (a thread or two, each with a stack and guard page among the anonymous
// mappings), anonymous mappings also by malloc's arenas; resident memory by what malloc keeps.
constexpr LeakTolerance kFlat{
    .threads = 1, .library_threads = 2, .fds = 0, .file_maps = 0, .anon_maps = 8, .shm = 0};
constexpr int64_t kRssToleranceKib = 16 << 10;

TEST(Soak, UpdatesKeepEveryRanksBytesExactAndWsyncdsResourcesFlat) {
  const int updates = EnvInt("WSYNC_SOAK_UPDATES", 200);
  const int warmup = std::max(10, updates / 10);
  ClusterOptions options;
  options.wsyncd_bin = WSYNCD_BIN;
  options.dir = absl::StrCat(::testing::TempDir(), "/wsync-soak-", ::getpid());
  RealCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok()) << cluster.DaemonLog();
  auto client = cluster.Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->OpenSession(0, "soak").ok());

  const int pid = cluster.daemon_pid();
  std::vector<ProcessResources> samples;
  std::vector<double> seconds;
  const absl::Time start = absl::Now();
  std::printf("%8s %8s %8s %6s %6s %8s %4s\n", "update", "elapsed", "rss_MiB", "fds", "maps",
              "threads", "shm");
  for (int v = 1; v <= updates; ++v) {
    if (v % 25 == 0) {
      ASSERT_TRUE((*client)->CloseSession().ok());
      client = cluster.Connect();
      ASSERT_TRUE(client.ok()) << client.status();
      ASSERT_TRUE((*client)->OpenSession(0, absl::StrCat("soak ", v)).ok());
    }
    if (v % 10 == 0) {
      ASSERT_TRUE(cluster.Group().ok());
      ASSERT_TRUE(cluster.Updates().ok());
    }
    const std::vector<OwnedTensor> model = ModelWithOversizeTensor(static_cast<uint32_t>(v));
    const absl::Time t0 = absl::Now();
    absl::Status s = cluster.PushAndVerify(**client, absl::StrCat("v", v), model);
    ASSERT_TRUE(s.ok()) << "update " << v << ": " << s << "\n" << cluster.DaemonLog();
    seconds.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
    samples.push_back(SampleResources(pid));
    const ProcessResources& r = samples.back();
    if (v == 1 || v == warmup || v % std::max(1, updates / 10) == 0) {
      std::printf("%8d %7.1fs %8.1f %6d %6d %8d %4d\n", v,
                  absl::ToDoubleSeconds(absl::Now() - start), r.rss_kib / 1024.0, r.fds, r.maps,
                  r.threads, r.shm);
      std::fflush(stdout);
    }
  }
  const ProcessResources base = samples[warmup - 1];
  const ProcessResources end = SettledResources(pid, base, kFlat);
  ProcessResources peak = base;
  for (size_t i = warmup; i < samples.size(); ++i) {
    peak.threads = std::max(peak.threads, samples[i].threads);
    peak.library_threads = std::max(peak.library_threads, samples[i].library_threads);
    peak.fds = std::max(peak.fds, samples[i].fds);
    peak.maps = std::max(peak.maps, samples[i].maps);
    peak.file_maps = std::max(peak.file_maps, samples[i].file_maps);
    peak.shm = std::max(peak.shm, samples[i].shm);
    peak.rss_kib = std::max(peak.rss_kib, samples[i].rss_kib);
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "soak: %d updates in %.1f s (update p50 %.3f s, p99 %.3f s, max %.3f s); every rank's "
      "bytes checked after each\n",
      updates, absl::ToDoubleSeconds(absl::Now() - start), sorted[sorted.size() / 2],
      sorted[std::min(sorted.size() - 1, sorted.size() * 99 / 100)], sorted.back());
  std::printf("soak: after %d warm-up updates: %s\n", warmup, base.Describe().c_str());
  std::printf("soak: peak after the warm-up:  %s\n", peak.Describe().c_str());
  std::printf("soak: at the end, idle:         %s\n", end.Describe().c_str());
  std::printf(
      "soak: growth: threads %+d, fds %+d, maps %+d (of files %+d), shm %+d, rss %+.1f MiB\n",
      end.threads - base.threads, end.fds - base.fds, end.maps - base.maps,
      end.file_maps - base.file_maps, end.shm - base.shm, (end.rss_kib - base.rss_kib) / 1024.0);
  if (const char* csv = std::getenv("WSYNC_SOAK_CSV")) {
    std::ofstream out(csv);
    out << "update,seconds,rss_kib,fds,maps,threads,shm\n";
    for (size_t i = 0; i < samples.size(); ++i) {
      out << i + 1 << "," << seconds[i] << "," << samples[i].rss_kib << "," << samples[i].fds << ","
          << samples[i].maps << "," << samples[i].threads << "," << samples[i].shm << "\n";
    }
  }
  EXPECT_TRUE(WithinTolerance(base, end, kFlat))
      << "grew from " << base.Describe() << " to " << end.Describe();
  EXPECT_TRUE(WithinTolerance(base, peak, kFlat))
      << "peaked at " << peak.Describe() << " after " << base.Describe();
  EXPECT_LE(peak.rss_kib - base.rss_kib, kRssToleranceKib)
      << "resident memory grew from " << base.rss_kib << " KiB to " << peak.rss_kib << " KiB";
  EXPECT_EQ(end.shm, 2)
      << "the one allocation of wsyncd's slots and its oversize slot, and nothing else";
  EXPECT_TRUE(cluster.DaemonUp());
}

}  // namespace
}  // namespace wsync
