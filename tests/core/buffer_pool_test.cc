#include "daemon/core/buffer_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "common/host/host_platform.h"
#include "common/host/shm_slot.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST(BufferPool, LeasesADevicesSlotsToOneSessionAtATime) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  BufferPool pool(&platform, 2, 4096);
  auto slots = pool.Lease(0, "s1");
  ASSERT_TRUE(slots.ok());
  EXPECT_EQ(slots->size(), 2u);
  auto second = pool.Lease(0, "s2");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("held by session s1"));
  EXPECT_TRUE(pool.Transition(0, 1, "s1", SlotState::kFilling, SlotState::kQueued).ok());
  EXPECT_THAT(pool.Transition(0, 1, "s1", SlotState::kFilling, SlotState::kQueued).message(),
              HasSubstr("wait for its SlotFree"));
  EXPECT_THAT(pool.Transition(0, 5, "s1", SlotState::kFilling, SlotState::kQueued).message(),
              HasSubstr("slot 5 is not held"));
  EXPECT_THAT(pool.Transition(0, 0, "s2", SlotState::kFilling, SlotState::kQueued).message(),
              HasSubstr("not held by session s2"));
  pool.Release(0, "s1");
  auto again = pool.Lease(0, "s2");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0], (*slots)[0]) << "slots are allocated once and reused";
  EXPECT_EQ(pool.slot_count(), 2u);
}

TEST(BufferPool, ADevicesSlotsAreAlignedRegionsOfOneSegmentAndTheOversizeSlotIsItsOwn) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  constexpr uint64_t kBytes = (1 << 20) + 3;
  BufferPool pool(&platform, 3, kBytes);
  auto slots = pool.Lease(0, "s1");
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 3u);
  const uint64_t stride = SlotStride(kBytes);
  EXPECT_EQ(stride % kSlotAlignment, 0u);
  EXPECT_GE(stride, kBytes);
  for (uint32_t i = 0; i < 3; ++i) {
    SlotMemory* slot = (*slots)[i];
    EXPECT_EQ(slot->memory_handle(), (*slots)[0]->memory_handle()) << "one segment";
    EXPECT_EQ(slot->allocation_offset(), i * stride);
    EXPECT_EQ(slot->allocation_bytes(), 3 * stride);
    EXPECT_EQ(slot->bytes(), kBytes);
    EXPECT_EQ(static_cast<char*>(slot->data()),
              static_cast<char*>((*slots)[0]->data()) + i * stride);
  }
  // A client maps the segment once and sees each slot's bytes at its offset.
  std::vector<char> data(64, 'x');
  std::memcpy((*slots)[2]->data(), data.data(), data.size());
  auto mapping = ShmMapping::Open((*slots)[0]->memory_handle(), 3 * stride);
  ASSERT_TRUE(mapping.ok()) << mapping.status();
  auto mapped = ShmMappedSlot::OpenRegion(*mapping, 2 * stride, kBytes);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(std::memcmp((*mapped)->data(), data.data(), data.size()), 0);
  EXPECT_EQ(ShmMappedSlot::OpenRegion(*mapping, 3 * stride - kBytes + 1, kBytes).status().code(),
            absl::StatusCode::kOutOfRange);
  // The oversize slot is a segment of its own.
  auto oversize = pool.LeaseOversize(0, "s1", 5 << 20);
  ASSERT_TRUE(oversize.ok()) << oversize.status();
  EXPECT_NE(oversize->second->memory_handle(), (*slots)[0]->memory_handle());
  EXPECT_EQ(oversize->second->allocation_offset(), 0u);
  EXPECT_EQ(oversize->second->allocation_bytes(), oversize->second->bytes());
}

// Found by the fault matrix: a trainer that truncated a slot to part of its first page and sent
// a bucket within it (its bytes read as zeros: no fault, only a checksum mismatch) left the slot
// shrunk, and the next session could not map it.
TEST(BufferPool, EachSessionGetsItsSlotsWhole) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  BufferPool pool(&platform, 2, 1 << 20);
  auto slots = pool.Lease(0, "s1");
  ASSERT_TRUE(slots.ok());
  for (SlotMemory* slot : *slots) {
    const int fd = ::shm_open(slot->memory_handle().c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 100), 0);
    ::close(fd);
  }
  pool.Release(0, "s1");
  auto next = pool.Lease(0, "s2");
  ASSERT_TRUE(next.ok());
  for (SlotMemory* slot : *next) {
    EXPECT_TRUE(slot->CheckIntact().ok());
    auto mapped = ShmMappedSlot::Open(slot->memory_handle(), slot->bytes());
    EXPECT_TRUE(mapped.ok()) << mapped.status();
  }
}

}  // namespace
}  // namespace wsync
