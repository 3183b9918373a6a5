// Host-mode shared memory that dead processes left behind is swept; live processes' is not.

#include "common/host/shm_sweep.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

// A pid that named a process a moment ago and names none now.
int DeadPid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return static_cast<int>(child);
}

void MakeFile(const std::string& path, size_t bytes) {
  std::ofstream(path) << std::string(bytes, 'x');
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out.insert(e.path().filename().string());
  }
  return out;
}

TEST(ShmOwnerPid, ReadsThePidOfEveryNameWsyncMakesAndNothingElse) {
  EXPECT_EQ(ShmOwnerPid("wsync-1234-d0-7-0badf00d"), 1234);  // a slot
  EXPECT_EQ(ShmOwnerPid("wsync-99-src-0123abcd-4"), 99);     // a pull source
  EXPECT_EQ(ShmOwnerPid("wsync-src-99-4"), std::nullopt);    // the old source names
  EXPECT_EQ(ShmOwnerPid("wsync-0-d0"), std::nullopt);
  EXPECT_EQ(ShmOwnerPid("wsync-12x-d0"), std::nullopt);
  EXPECT_EQ(ShmOwnerPid("wsync-99999999999999999999-d0"), std::nullopt);
  EXPECT_EQ(ShmOwnerPid("wsync-1234"), std::nullopt);
  EXPECT_EQ(ShmOwnerPid("other-1234-d0"), std::nullopt);
}

TEST(SweepDeadShm, RemovesExactlyTheRegularFilesOfThisUidWhoseMakerIsGone) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/shm-sweep-", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int dead = DeadPid();
  const int live = static_cast<int>(::getppid());  // the test runner's parent, alive meanwhile
  const std::string dead_slot = absl::StrCat("wsync-", dead, "-d0-0-0000abcd");
  const std::string dead_source = absl::StrCat("wsync-", dead, "-src-0123abcd-1");
  const std::string live_slot = absl::StrCat("wsync-", live, "-d0-0-0000abcd");
  const std::string own_slot = absl::StrCat("wsync-", ::getpid(), "-d0-0-0000abcd");
  const std::string other_name = absl::StrCat("other-", dead, "-d0");
  const std::string dead_link = absl::StrCat("wsync-", dead, "-d0-1-link");
  const std::string dead_dir = absl::StrCat("wsync-", dead, "-d0-2-dir");
  MakeFile(dir + "/" + dead_slot, 100);
  MakeFile(dir + "/" + dead_source, 7);
  MakeFile(dir + "/" + live_slot, 10);
  MakeFile(dir + "/" + own_slot, 10);
  MakeFile(dir + "/" + other_name, 10);
  std::filesystem::create_symlink(dir + "/" + live_slot, dir + "/" + dead_link);
  std::filesystem::create_directory(dir + "/" + dead_dir);
  std::set<std::string> kept = {live_slot, own_slot, other_name, dead_link, dead_dir};
  if (::geteuid() == 0) {
    const std::string strangers = absl::StrCat("wsync-", dead, "-d0-3-0000abcd");
    MakeFile(dir + "/" + strangers, 10);
    ASSERT_EQ(::chown((dir + "/" + strangers).c_str(), 65534, 65534), 0);
    kept.insert(strangers);
  }

  auto swept = SweepDeadShm(dir);
  ASSERT_TRUE(swept.ok()) << swept.status();
  std::set<std::string> removed;
  for (const SweptShm& s : *swept) {
    removed.insert(s.entry);
    EXPECT_EQ(s.pid, dead);
    EXPECT_EQ(s.bytes, s.entry == dead_slot ? 100u : 7u);
  }
  EXPECT_EQ(removed, (std::set<std::string>{dead_slot, dead_source}));
  EXPECT_EQ(Entries(dir), kept);
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(SweepDeadShm(dir).ok());
}

TEST(SweepDeadShm, InDevShmRemovesADeadPidsSegmentAndKeepsALiveOnes) {
  const int dead = DeadPid();
  const std::string dead_name = absl::StrCat("/wsync-", dead, "-d0-0-5eed0001");
  const std::string live_name = absl::StrCat("/wsync-", ::getppid(), "-d0-0-5eed0002");
  for (const std::string& name : {dead_name, live_name}) {
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0) << name;
    ASSERT_EQ(::ftruncate(fd, 4096), 0);
    ::close(fd);
  }
  auto swept = SweepDeadShm("/dev/shm");
  ASSERT_TRUE(swept.ok()) << swept.status();
  bool reported = false;
  for (const SweptShm& s : *swept) reported = reported || "/" + s.entry == dead_name;
  EXPECT_TRUE(reported);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + dead_name));
  EXPECT_TRUE(std::filesystem::exists("/dev/shm" + live_name));
  ::shm_unlink(live_name.c_str());
  ::shm_unlink(dead_name.c_str());
}

}  // namespace
}  // namespace wsync
