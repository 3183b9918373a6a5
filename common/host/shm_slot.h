#ifndef WSYNC_COMMON_HOST_SHM_SLOT_H_
#define WSYNC_COMMON_HOST_SHM_SLOT_H_

#include <memory>
#include <string>

#include "common/gpu_seam.h"
#include "common/host/shm_region.h"

namespace wsync {

// A slot in POSIX shared memory, created 0600 so only the daemon's user can map it. The trainer
// maps it read-write and so can also truncate it: wsyncd's reads and writes of it run under a fault
// guard (fault_guard.h), and a slot found shrunk is grown back to its size.
class ShmSlot final : public SlotMemory {
 public:
  static absl::StatusOr<std::unique_ptr<ShmSlot>> Create(int device, uint64_t bytes);
  ~ShmSlot() override;

  MemoryKind kind() const override { return MemoryKind::kHostShm; }
  int device() const override { return device_; }
  uint64_t bytes() const override { return bytes_; }
  void* data() override { return data_; }
  std::string memory_handle() const override { return name_; }
  std::string event_handle() const override { return ""; }
  absl::StatusOr<uint32_t> Checksum(uint64_t bytes) override;
  absl::StatusOr<uint32_t> FillFrom(const std::vector<SourcePiece>& pieces, uint64_t span) override;
  absl::Status CheckIntact() override;

 private:
  ShmSlot(int device, uint64_t bytes, std::string name, ShmSegment segment)
      : device_(device),
        bytes_(bytes),
        name_(std::move(name)),
        data_(segment.data),
        fd_(std::move(segment.fd)) {}
  // The error for a guarded access that faulted at `address`, which lies in the slot.
  absl::Status SlotFault(const void* address);

  int device_;
  uint64_t bytes_;
  std::string name_;
  void* data_;
  UniqueFd fd_;
};

// The client's mapping of a ShmSlot.
class ShmMappedSlot final : public MappedSlot {
 public:
  static absl::StatusOr<std::unique_ptr<ShmMappedSlot>> Open(const std::string& name,
                                                             uint64_t bytes);
  ~ShmMappedSlot() override;

  uint64_t bytes() const override { return bytes_; }
  void* data() override { return data_; }
  absl::Status CopyIn(uint64_t offset, const void* src, uint64_t bytes) override;
  absl::StatusOr<uint32_t> Checksum(uint64_t bytes) override;
  absl::Status MarkWritten() override { return absl::OkStatus(); }

 private:
  ShmMappedSlot(uint64_t bytes, void* data) : bytes_(bytes), data_(data) {}
  uint64_t bytes_;
  void* data_;
};

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_SHM_SLOT_H_
