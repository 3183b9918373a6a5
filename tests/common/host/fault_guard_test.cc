// A trainer may truncate shared memory wsyncd has mapped (its slot, or a pull source). wsyncd's
// reads and writes of it run under a fault guard, which turns the SIGBUS into an error.

#include "common/host/fault_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/host/guarded_copy.h"
#include "common/host/host_source.h"
#include "common/host/shm_region.h"
#include "common/host/shm_slot.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kPage = 4096;

// What a misbehaving trainer does: opens the segment by name and cuts it to `bytes`.
void Truncate(const std::string& name, uint64_t bytes) {
  int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
  ::close(fd);
}

// A segment of the test's own, mapped, unlinked when done.
class Segment {
 public:
  explicit Segment(uint64_t bytes) : bytes_(bytes) {
    static int n = 0;
    name_ = absl::StrCat("/wsync-", ::getpid(), "-guard-test-", n++);
    auto segment = CreateShm(name_, bytes);
    EXPECT_TRUE(segment.ok()) << segment.status();
    data_ = static_cast<char*>(segment->data);
    std::memset(data_, 7, bytes);
  }
  ~Segment() {
    ::munmap(data_, bytes_);
    ::shm_unlink(name_.c_str());
  }
  char* data() const { return data_; }
  const std::string& name() const { return name_; }
  GuardedRange range() const { return GuardedRange{data_, bytes_}; }

 private:
  std::string name_;
  char* data_ = nullptr;
  uint64_t bytes_;
};

struct Read {
  const char* from;
  uint64_t bytes;
  uint64_t sum = 0;
};
// Volatile: the unguarded calls below must really read, though nothing uses the sum.
void SumBytes(void* arg) {
  auto* r = static_cast<Read*>(arg);
  const volatile char* from = r->from;
  for (uint64_t i = 0; i < r->bytes; ++i) r->sum += static_cast<unsigned char>(from[i]);
}

TEST(FaultGuard, ASigbusInsideItsRangeReturnsTheAddressAndTheThreadCarriesOn) {
  Segment segment(16 * kPage);
  Truncate(segment.name(), 4 * kPage);
  const GuardedRange range = segment.range();
  Read read{segment.data(), 16 * kPage};
  const void* fault = RunGuarded(&range, 1, SumBytes, &read);
  EXPECT_EQ(fault, segment.data() + 4 * kPage) << "the first byte past the new end";
  EXPECT_EQ(read.sum, 7u * 4 * kPage) << "everything before it was read";
  // The jump restored the mask: SIGBUS is not left blocked, and the next guard works.
  sigset_t mask;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &mask), 0);
  EXPECT_FALSE(sigismember(&mask, SIGBUS));
  Read again{segment.data(), 4 * kPage};
  EXPECT_EQ(RunGuarded(&range, 1, SumBytes, &again), nullptr);
  EXPECT_EQ(again.sum, 7u * 4 * kPage);
  Read past{segment.data() + 8 * kPage, kPage};
  EXPECT_EQ(RunGuarded(&range, 1, SumBytes, &past), segment.data() + 8 * kPage);
}

struct Nested {
  const GuardedRange* inner_ranges;
  Read* inner_read;
  const void* inner_fault = nullptr;
  bool inner_returned = false;
};
void RunInner(void* arg) {
  auto* n = static_cast<Nested*>(arg);
  n->inner_fault = RunGuarded(n->inner_ranges, 1, SumBytes, n->inner_read);
  n->inner_returned = true;
}

TEST(FaultGuard, GuardsNestAndTheInnermostOneCoveringTheAddressTakesTheFault) {
  Segment outer_memory(8 * kPage);
  Segment inner_memory(8 * kPage);
  Truncate(outer_memory.name(), kPage);
  Truncate(inner_memory.name(), kPage);
  const GuardedRange outer_range = outer_memory.range();
  const GuardedRange inner_range = inner_memory.range();
  // The inner guard covers the address: it returns, and the outer function goes on.
  Read inner_read{inner_memory.data(), 2 * kPage};
  Nested covered{&inner_range, &inner_read};
  EXPECT_EQ(RunGuarded(&outer_range, 1, RunInner, &covered), nullptr);
  EXPECT_TRUE(covered.inner_returned);
  EXPECT_EQ(covered.inner_fault, inner_memory.data() + kPage);
  // Only the outer one covers it: the inner guard is abandoned with the function it ran.
  Read outer_read{outer_memory.data(), 2 * kPage};
  Nested uncovered{&inner_range, &outer_read};
  EXPECT_EQ(RunGuarded(&outer_range, 1, RunInner, &uncovered), outer_memory.data() + kPage);
  EXPECT_FALSE(uncovered.inner_returned);
  // Both are gone: a fault now is no guard's (checked by the death tests below), and a new guard
  // works.
  Read fresh{inner_memory.data() + 3 * kPage, 1};
  EXPECT_EQ(RunGuarded(&inner_range, 1, SumBytes, &fresh), inner_memory.data() + 3 * kPage);
}

// A SIGBUS no guard takes goes to the handler installed before the guard's: none, and the
// signal kills the process; under ASan or TSan, the sanitizer's, which reports it and exits.
#if defined(__SANITIZE_ADDRESS__)
#define WSYNC_SIGBUS_REPORT "AddressSanitizer: BUS"
#elif defined(__SANITIZE_THREAD__)
#define WSYNC_SIGBUS_REPORT "ThreadSanitizer: BUS"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WSYNC_SIGBUS_REPORT "AddressSanitizer: BUS"
#elif __has_feature(thread_sanitizer)
#define WSYNC_SIGBUS_REPORT "ThreadSanitizer: BUS"
#endif
#endif
#ifdef WSYNC_SIGBUS_REPORT
bool DiedOfSigbus(int status) { return WIFEXITED(status) && WEXITSTATUS(status) != 0; }
constexpr char kSigbusDeath[] = WSYNC_SIGBUS_REPORT;
#else
bool DiedOfSigbus(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS; }
constexpr char kSigbusDeath[] = "";
#endif

// The death tests' bodies run in a fresh process ("threadsafe" style), so the guard there is
// installed after whatever the body installs first.
void FaultOutsideTheGuardedRange() {
  Segment guarded(4 * kPage);
  Segment other(4 * kPage);
  Truncate(other.name(), 0);
  const GuardedRange range = guarded.range();
  Read read{other.data(), kPage};
  (void)RunGuarded(&range, 1, SumBytes, &read);
  std::exit(0);
}

TEST(FaultGuardDeathTest, AFaultOutsideEveryGuardedRangeStillKillsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(FaultOutsideTheGuardedRange(), DiedOfSigbus, kSigbusDeath);
}

std::atomic<bool> g_inside{false};
std::atomic<bool> g_release{false};
void SpinInsideTheGuard(void*) {
  g_inside = true;
  while (!g_release) {
  }
}

void FaultBesideAnotherThreadsGuard() {
  Segment memory(4 * kPage);
  Truncate(memory.name(), 0);
  const GuardedRange range = memory.range();
  // One thread sits inside a guard covering the memory...
  std::thread guarded([&] { (void)RunGuarded(&range, 1, SpinInsideTheGuard, nullptr); });
  while (!g_inside) {
  }
  // ...while this one, unguarded, reads it.
  Read read{memory.data(), kPage};
  SumBytes(&read);
  g_release = true;
  guarded.join();
  std::exit(0);
}

TEST(FaultGuardDeathTest, AnotherThreadsGuardDoesNotCoverThisThread) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(FaultBesideAnotherThreadsGuard(), DiedOfSigbus, kSigbusDeath);
}

void PreviousHandler(int) {
  static const char kMessage[] = "the previous handler ran\n";
  (void)!::write(2, kMessage, sizeof(kMessage) - 1);
  ::_exit(42);
}

void FaultUnderAnEarlierHandler() {
  ::signal(SIGBUS, PreviousHandler);
  InstallFaultGuard();
  Segment memory(4 * kPage);
  Truncate(memory.name(), 0);
  Read read{memory.data(), kPage};
  SumBytes(&read);
  std::exit(0);
}

TEST(FaultGuardDeathTest, ASigbusThatIsNotTheGuardsGoesToTheHandlerInstalledBefore) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(FaultUnderAnEarlierHandler(), ::testing::ExitedWithCode(42),
              "the previous handler ran");
}

TEST(GuardedCrc32, MatchesCrc32ParallelAndReportsAFaultInAWorkerThread) {
  const uint64_t bytes = 24u << 20;  // two chunks: the second runs on a worker thread
  Segment memory(bytes);
  for (uint64_t i = 0; i < bytes; i += 4093) memory.data()[i] = static_cast<char>(i * 31);
  const GuardedRange range = memory.range();
  GuardedCrc crc = GuardedCrc32({range}, memory.data(), bytes, 2);
  ASSERT_EQ(crc.fault, nullptr);
  EXPECT_EQ(crc.crc, Crc32Parallel(memory.data(), bytes, 2));
  EXPECT_EQ(crc.crc, Crc32(memory.data(), bytes));
  Truncate(memory.name(), 20u << 20);
  crc = GuardedCrc32({range}, memory.data(), bytes, 2);
  EXPECT_EQ(crc.fault, memory.data() + (20u << 20));
}

TEST(ShmSlotTruncated, ItsChecksumIsDataLossAndTheSlotIsGrownBackForTheNextBucket) {
  const uint64_t bytes = 24u << 20;
  auto slot = ShmSlot::Create(0, bytes);
  ASSERT_TRUE(slot.ok()) << slot.status();
  const std::string name = (*slot)->memory_handle();
  Truncate(name, 0);
  auto crc = (*slot)->Checksum(bytes);
  EXPECT_EQ(crc.status().code(), absl::StatusCode::kDataLoss) << crc.status();
  EXPECT_THAT(crc.status().message(),
              HasSubstr(absl::StrCat(name, " shrank under wsyncd to 0 of ", bytes, " bytes")));
  EXPECT_THAT(crc.status().message(), HasSubstr("grew it back"));
  EXPECT_TRUE((*slot)->CheckIntact().ok());
  std::vector<char> zeros(bytes, 0);
  crc = (*slot)->Checksum(bytes);
  ASSERT_TRUE(crc.ok()) << crc.status();
  EXPECT_EQ(*crc, Crc32(zeros.data(), bytes));
  // Cut in the second half: the worker thread's chunk faults.
  Truncate(name, 16u << 20);
  EXPECT_EQ((*slot)->Checksum(bytes).status().code(), absl::StatusCode::kDataLoss);
  // Without reading it (no checksum), CheckIntact sees the cut.
  Truncate(name, kPage);
  absl::Status intact = (*slot)->CheckIntact();
  EXPECT_EQ(intact.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(intact.message(), HasSubstr(absl::StrCat("to ", kPage, " of ", bytes, " bytes")));
  EXPECT_TRUE((*slot)->CheckIntact().ok());
}

TEST(ShmSlotTruncated, FillingFromAShrunkPullSourceOrIntoAShrunkSlotIsDataLoss) {
  auto arena = HostSourceArena::Create("guardtest", 64 * kPage);
  ASSERT_TRUE(arena.ok()) << arena.status();
  std::memset((*arena)->data(), 5, 64 * kPage);
  auto source = MapHostSource((*arena)->name(), 64 * kPage, "guardtest");
  ASSERT_TRUE(source.ok()) << source.status();
  auto slot = ShmSlot::Create(0, 64 * kPage);
  ASSERT_TRUE(slot.ok());
  const char* src = static_cast<const char*>((*source)->data());
  const std::vector<SourcePiece> pieces = {{src, 0, 8 * kPage, source->get()},
                                           {src + 40 * kPage, 8 * kPage, 8 * kPage, source->get()}};
  ASSERT_TRUE((*slot)->FillFrom(pieces, 16 * kPage).ok());
  EXPECT_TRUE((*source)->CheckIntact().ok());

  Truncate((*arena)->name(), 32 * kPage);  // the second piece now lies past the end
  absl::Status filled = (*slot)->FillFrom(pieces, 16 * kPage);
  EXPECT_EQ(filled.code(), absl::StatusCode::kDataLoss) << filled;
  EXPECT_THAT(filled.message(),
              HasSubstr(absl::StrCat("pull source ", (*arena)->name(), " shrank under wsyncd to ",
                                     32 * kPage, " of the ", 64 * kPage, " bytes")));
  EXPECT_EQ((*source)->CheckIntact().code(), absl::StatusCode::kDataLoss);

  const std::vector<SourcePiece> first = {pieces[0]};
  Truncate((*slot)->memory_handle(), kPage);  // now the slot, being written
  filled = (*slot)->FillFrom(first, 8 * kPage);
  EXPECT_EQ(filled.code(), absl::StatusCode::kDataLoss) << filled;
  EXPECT_THAT(filled.message(),
              HasSubstr(absl::StrCat((*slot)->memory_handle(), " shrank under wsyncd")));
  filled = (*slot)->FillFrom(first, 8 * kPage);
  EXPECT_TRUE(filled.ok()) << "grown back: " << filled;
}

}  // namespace
}  // namespace wsync
