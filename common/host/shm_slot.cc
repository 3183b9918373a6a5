#include "common/host/shm_slot.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/host/guarded_copy.h"
#include "common/host/shm_names.h"
#include "common/status_macros.h"

namespace wsync {
namespace {

uint64_t OffsetIn(const void* address, const void* base) {
  return reinterpret_cast<uintptr_t>(address) - reinterpret_cast<uintptr_t>(base);
}

// A pull source that faulted at `address` (inside piece.src's range).
absl::Status SourceFault(const SourcePiece& piece, const void* address) {
  if (piece.memory != nullptr) {
    absl::Status intact = piece.memory->CheckIntact();
    if (!intact.ok()) return intact;
  }
  return absl::DataLossError(absl::StrCat(
      "reading ", piece.memory != nullptr ? piece.memory->Describe() : "a trainer allocation",
      " faulted (SIGBUS) ", OffsetIn(address, piece.src),
      " bytes into a tensor: it shrank under wsyncd (the trainer truncated it)"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<ShmArena>> ShmArena::Create(int device, uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("slot size must be positive");
  std::string name = SlotShmName(device);
  WSYNC_ASSIGN_OR_RETURN(ShmSegment segment, CreateShm(name, bytes));
  return std::shared_ptr<ShmArena>(new ShmArena(bytes, std::move(name), std::move(segment)));
}

ShmArena::~ShmArena() {
  ::munmap(data_, bytes_);
  ::shm_unlink(name_.c_str());
}

absl::Status ShmArena::CheckIntact() {
  WSYNC_ASSIGN_OR_RETURN(uint64_t size, ShmSize(fd_.get()));
  if (size >= bytes_) return absl::OkStatus();
  // Grown back (zeros past the cut), so the slots serve later buckets; the trainer rewrites them.
  const bool restored = ::ftruncate(fd_.get(), static_cast<off_t>(bytes_)) == 0;
  return absl::DataLossError(
      absl::StrCat("its shared memory ", name_, " shrank under wsyncd to ", size, " of ", bytes_,
                   " bytes (the trainer truncated it); ",
                   restored ? "wsyncd grew it back for later buckets" : "growing it back failed"));
}

absl::StatusOr<std::unique_ptr<ShmSlot>> ShmSlot::Create(int device, uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(std::shared_ptr<ShmArena> arena, ShmArena::Create(device, bytes));
  return std::unique_ptr<ShmSlot>(new ShmSlot(device, std::move(arena), 0, bytes));
}

absl::StatusOr<std::vector<std::unique_ptr<ShmSlot>>> ShmSlot::CreateRegions(int device,
                                                                             uint32_t count,
                                                                             uint64_t bytes) {
  if (count == 0 || bytes == 0) return absl::InvalidArgumentError("slot size must be positive");
  const uint64_t stride = SlotStride(bytes);
  WSYNC_ASSIGN_OR_RETURN(std::shared_ptr<ShmArena> arena, ShmArena::Create(device, stride * count));
  std::vector<std::unique_ptr<ShmSlot>> slots;
  for (uint32_t i = 0; i < count; ++i) {
    slots.push_back(std::unique_ptr<ShmSlot>(new ShmSlot(device, arena, stride * i, bytes)));
  }
  return slots;
}

absl::Status ShmSlot::SlotFault(const void* address) {
  absl::Status intact = CheckIntact();
  if (!intact.ok()) return intact;
  return absl::DataLossError(absl::StrCat(
      "accessing its shared memory ", arena_->name(), " faulted (SIGBUS) at byte ",
      OffsetIn(address, arena_->data()), ": it shrank under wsyncd and grew back meanwhile"));
}

absl::StatusOr<uint32_t> ShmSlot::Checksum(uint64_t bytes) {
  if (bytes > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  const GuardedCrc crc = GuardedCrc32({GuardedRange{data_, bytes_}}, data_, bytes, 2);
  if (crc.fault != nullptr) return SlotFault(crc.fault);
  return crc.crc;
}

absl::StatusOr<uint32_t> ShmSlot::SampledChecksum(uint64_t span) {
  if (span > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  // The windows are copied out under the guard, then checksummed.
  std::vector<char> sample(SampledBytes(span));
  std::vector<GuardedCopyPiece> pieces;
  uint64_t packed = 0;
  for (const ByteWindow& w : SampledWindows(span)) {
    pieces.push_back(
        GuardedCopyPiece{sample.data() + packed, static_cast<char*>(data_) + w.offset, w.bytes});
    packed += w.bytes;
  }
  if (const void* fault = GuardedCopy({GuardedRange{data_, bytes_}}, pieces); fault != nullptr) {
    return SlotFault(fault);
  }
  return Crc32(sample.data(), sample.size());
}

absl::Status ShmSlot::FillFrom(const std::vector<SourcePiece>& pieces, uint64_t span) {
  WSYNC_RETURN_IF_ERROR(CheckFillFits(*this, pieces, span));
  // Both ends are the trainer's to truncate: the slot, and the sources it made.
  std::vector<GuardedRange> ranges = {GuardedRange{data_, bytes_}};
  std::vector<GuardedCopyPiece> copies;
  ranges.reserve(pieces.size() + 1);
  copies.reserve(pieces.size());
  for (const SourcePiece& p : pieces) {
    ranges.push_back(GuardedRange{p.src, p.bytes});
    copies.push_back(GuardedCopyPiece{static_cast<char*>(data_) + p.offset, p.src, p.bytes});
  }
  if (const void* fault = GuardedCopy(ranges, copies); fault != nullptr) {
    if (ranges[0].Contains(fault)) return SlotFault(fault);
    for (const SourcePiece& p : pieces) {
      if (GuardedRange{p.src, p.bytes}.Contains(fault)) return SourceFault(p, fault);
    }
    return absl::DataLossError("a guarded copy faulted outside its ranges");  // unreachable
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ShmMapping>> ShmMapping::Open(const std::string& name,
                                                             uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(ShmSegment segment, OpenShm(name, bytes, /*writable=*/true));
  return std::shared_ptr<ShmMapping>(new ShmMapping(segment.data, bytes));
}

ShmMapping::~ShmMapping() { ::munmap(data_, bytes_); }

absl::StatusOr<std::unique_ptr<ShmMappedSlot>> ShmMappedSlot::Open(const std::string& name,
                                                                   uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(std::shared_ptr<ShmMapping> mapping, ShmMapping::Open(name, bytes));
  return OpenRegion(std::move(mapping), 0, bytes);
}

absl::StatusOr<std::unique_ptr<ShmMappedSlot>> ShmMappedSlot::OpenRegion(
    std::shared_ptr<MappedAllocation> allocation, uint64_t offset, uint64_t bytes) {
  if (allocation == nullptr || offset > allocation->bytes() ||
      bytes > allocation->bytes() - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("a slot of ", bytes, " bytes at ", offset, " does not fit its allocation of ",
                     allocation == nullptr ? 0 : allocation->bytes(), " bytes"));
  }
  return std::unique_ptr<ShmMappedSlot>(new ShmMappedSlot(std::move(allocation), offset, bytes));
}

absl::Status ShmMappedSlot::CopyIn(uint64_t offset, const void* src, uint64_t bytes) {
  if (offset > bytes_ || bytes > bytes_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("copy of ", bytes, " bytes at ", offset,
                                              " exceeds the slot of ", bytes_, " bytes"));
  }
  std::memcpy(static_cast<char*>(data_) + offset, src, bytes);
  return absl::OkStatus();
}

// The trainer's side reads the daemon's slot, which only wsyncd could shrink: no guard.
absl::StatusOr<uint32_t> ShmMappedSlot::Checksum(uint64_t bytes) {
  if (bytes > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  return Crc32Parallel(data_, bytes, 2);
}

absl::StatusOr<uint32_t> ShmMappedSlot::SampledChecksum(uint64_t span) {
  if (span > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  return SampledCrc32(data_, span);
}

}  // namespace wsync
