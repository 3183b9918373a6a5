#include "common/host/shm_slot.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checksum.h"
#include "common/host/shm_region.h"
#include "common/status_macros.h"

namespace wsync {
namespace {

std::string NewShmName(int device) {
  static std::atomic<uint32_t> counter{0};
  std::random_device rd;
  return absl::StrFormat("/wsync-%d-d%d-%u-%08x", static_cast<int>(::getpid()), device,
                         counter.fetch_add(1), rd());
}

// Both sides of a slot checksum the same way (the daemon verifies what the trainer announced).
absl::StatusOr<uint32_t> ChecksumOfRegion(const void* data, uint64_t size, uint64_t bytes) {
  if (bytes > size) return absl::OutOfRangeError("checksum range exceeds the slot");
  return Crc32Parallel(data, bytes, 2);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmSlot>> ShmSlot::Create(int device, uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("slot size must be positive");
  std::string name = NewShmName(device);
  WSYNC_ASSIGN_OR_RETURN(void* data, CreateShm(name, bytes));
  return std::unique_ptr<ShmSlot>(new ShmSlot(device, bytes, std::move(name), data));
}

ShmSlot::~ShmSlot() {
  ::munmap(data_, bytes_);
  ::shm_unlink(name_.c_str());
}

absl::StatusOr<uint32_t> ShmSlot::Checksum(uint64_t bytes) {
  return ChecksumOfRegion(data_, bytes_, bytes);
}

absl::StatusOr<uint32_t> ShmSlot::FillFrom(const std::vector<SourcePiece>& pieces, uint64_t span) {
  WSYNC_RETURN_IF_ERROR(CheckFillFits(*this, pieces, span));
  for (const SourcePiece& p : pieces)
    std::memcpy(static_cast<char*>(data_) + p.offset, p.src, p.bytes);
  return Checksum(span);
}

absl::StatusOr<std::unique_ptr<ShmMappedSlot>> ShmMappedSlot::Open(const std::string& name,
                                                                   uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(void* data, OpenShm(name, bytes, /*writable=*/true));
  return std::unique_ptr<ShmMappedSlot>(new ShmMappedSlot(bytes, data));
}

ShmMappedSlot::~ShmMappedSlot() { ::munmap(data_, bytes_); }

absl::Status ShmMappedSlot::CopyIn(uint64_t offset, const void* src, uint64_t bytes) {
  if (offset > bytes_ || bytes > bytes_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("copy of ", bytes, " bytes at ", offset,
                                              " exceeds the slot of ", bytes_, " bytes"));
  }
  std::memcpy(static_cast<char*>(data_) + offset, src, bytes);
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ShmMappedSlot::Checksum(uint64_t bytes) {
  return ChecksumOfRegion(data_, bytes_, bytes);
}

}  // namespace wsync
