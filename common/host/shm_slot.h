#ifndef WSYNC_COMMON_HOST_SHM_SLOT_H_
#define WSYNC_COMMON_HOST_SHM_SLOT_H_

#include <memory>
#include <string>
#include <vector>

#include "common/gpu_seam.h"
#include "common/host/shm_region.h"

namespace wsync {

// One POSIX shared-memory segment holding slots, created 0600 so only the daemon's user can map it.
// Its slots share it (shared_ptr); it is unmapped and unlinked when the last of them goes.
class ShmArena {
 public:
  static absl::StatusOr<std::shared_ptr<ShmArena>> Create(int device, uint64_t bytes);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  const std::string& name() const { return name_; }
  uint64_t bytes() const { return bytes_; }
  char* data() const { return static_cast<char*>(data_); }
  // DATA_LOSS when a trainer truncated the segment, after growing it back to its size.
  absl::Status CheckIntact();

 private:
  ShmArena(uint64_t bytes, std::string name, ShmSegment segment)
      : bytes_(bytes), name_(std::move(name)), data_(segment.data), fd_(std::move(segment.fd)) {}
  uint64_t bytes_;
  std::string name_;
  void* data_;
  UniqueFd fd_;
};

// A slot in POSIX shared memory: a region of an ShmArena. The trainer maps the arena read-write and
// so can also truncate it: wsyncd's reads and writes of it run under a fault guard
// (fault_guard.h), and an arena found shrunk is grown back to its size.
class ShmSlot final : public SlotMemory {
 public:
  // One slot, alone in its segment.
  static absl::StatusOr<std::unique_ptr<ShmSlot>> Create(int device, uint64_t bytes);
  // `count` slots of `bytes` in one segment, SlotStride(bytes) apart.
  static absl::StatusOr<std::vector<std::unique_ptr<ShmSlot>>> CreateRegions(int device,
                                                                             uint32_t count,
                                                                             uint64_t bytes);

  MemoryKind kind() const override { return MemoryKind::kHostShm; }
  int device() const override { return device_; }
  uint64_t bytes() const override { return bytes_; }
  void* data() override { return data_; }
  std::string memory_handle() const override { return arena_->name(); }
  uint64_t allocation_offset() const override { return offset_; }
  uint64_t allocation_bytes() const override { return arena_->bytes(); }
  std::string event_handle() const override { return ""; }
  absl::StatusOr<uint32_t> Checksum(uint64_t bytes) override;
  absl::StatusOr<uint32_t> SampledChecksum(uint64_t span) override;
  absl::Status FillFrom(const std::vector<SourcePiece>& pieces, uint64_t span) override;
  absl::Status CheckIntact() override { return arena_->CheckIntact(); }

 private:
  ShmSlot(int device, std::shared_ptr<ShmArena> arena, uint64_t offset, uint64_t bytes)
      : device_(device),
        arena_(std::move(arena)),
        offset_(offset),
        bytes_(bytes),
        data_(arena_->data() + offset) {}
  // The error for a guarded access that faulted at `address`, which lies in the slot.
  absl::Status SlotFault(const void* address);

  int device_;
  std::shared_ptr<ShmArena> arena_;
  uint64_t offset_;
  uint64_t bytes_;
  void* data_;
};

// The client's mapping of one ShmArena, shared by the slots it holds.
class ShmMapping final : public MappedAllocation {
 public:
  static absl::StatusOr<std::shared_ptr<ShmMapping>> Open(const std::string& name, uint64_t bytes);
  ~ShmMapping() override;
  void* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  ShmMapping(void* data, uint64_t bytes) : data_(data), bytes_(bytes) {}
  void* data_;
  uint64_t bytes_;
};

// The client's view of a ShmSlot: its region of the arena's mapping.
class ShmMappedSlot final : public MappedSlot {
 public:
  // Maps a segment that holds one slot at its start.
  static absl::StatusOr<std::unique_ptr<ShmMappedSlot>> Open(const std::string& name,
                                                             uint64_t bytes);
  // The slot of `bytes` at `offset` in a mapping already made; OUT_OF_RANGE unless it fits.
  static absl::StatusOr<std::unique_ptr<ShmMappedSlot>> OpenRegion(
      std::shared_ptr<MappedAllocation> allocation, uint64_t offset, uint64_t bytes);

  uint64_t bytes() const override { return bytes_; }
  void* data() override { return data_; }
  absl::Status CopyIn(uint64_t offset, const void* src, uint64_t bytes) override;
  absl::StatusOr<uint32_t> Checksum(uint64_t bytes) override;
  absl::StatusOr<uint32_t> SampledChecksum(uint64_t span) override;
  absl::Status MarkWritten() override { return absl::OkStatus(); }

 private:
  ShmMappedSlot(std::shared_ptr<MappedAllocation> allocation, uint64_t offset, uint64_t bytes)
      : allocation_(std::move(allocation)),
        bytes_(bytes),
        data_(static_cast<char*>(allocation_->data()) + offset) {}
  std::shared_ptr<MappedAllocation> allocation_;
  uint64_t bytes_;
  void* data_;
};

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_SHM_SLOT_H_
