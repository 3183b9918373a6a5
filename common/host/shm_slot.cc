#include "common/host/shm_slot.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checksum.h"

namespace wsync {
namespace {

absl::Status ErrnoStatus(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

std::string NewShmName(int device) {
  static std::atomic<uint32_t> counter{0};
  std::random_device rd;
  return absl::StrFormat("/wsync-%d-d%d-%u-%08x", static_cast<int>(::getpid()), device,
                         counter.fetch_add(1), rd());
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmSlot>> ShmSlot::Create(int device, uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("slot size must be positive");
  std::string name = NewShmName(device);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(absl::StrCat("shm_open ", name));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    absl::Status s = ErrnoStatus(absl::StrCat("ftruncate ", name, " to ", bytes, " bytes"));
    ::close(fd);
    ::shm_unlink(name.c_str());
    return s;
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (data == MAP_FAILED) {
    absl::Status s = ErrnoStatus(absl::StrCat("mmap ", name));
    ::shm_unlink(name.c_str());
    return s;
  }
  return std::unique_ptr<ShmSlot>(new ShmSlot(device, bytes, std::move(name), data));
}

ShmSlot::~ShmSlot() {
  ::munmap(data_, bytes_);
  ::shm_unlink(name_.c_str());
}

absl::StatusOr<uint32_t> ShmSlot::Checksum(uint64_t bytes) {
  if (bytes > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  return Crc32Parallel(data_, bytes, 2);
}

absl::StatusOr<uint32_t> ShmSlot::FillFrom(const std::vector<SourcePiece>& pieces, uint64_t span) {
  for (const SourcePiece& p : pieces) {
    if (p.offset > bytes_ || p.bytes > bytes_ - p.offset) {
      return absl::OutOfRangeError(absl::StrCat("piece of ", p.bytes, " bytes at ", p.offset,
                                                " exceeds the slot of ", bytes_, " bytes"));
    }
  }
  for (const SourcePiece& p : pieces)
    std::memcpy(static_cast<char*>(data_) + p.offset, p.src, p.bytes);
  return Checksum(span);
}

absl::StatusOr<std::unique_ptr<ShmMappedSlot>> ShmMappedSlot::Open(const std::string& name,
                                                                   uint64_t bytes) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus(absl::StrCat("shm_open ", name));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", name, " is smaller than the announced ", bytes, " bytes"));
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (data == MAP_FAILED) return ErrnoStatus(absl::StrCat("mmap ", name));
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
  if (bytes > bytes_) return absl::OutOfRangeError("checksum range exceeds the slot");
  return Crc32Parallel(data_, bytes, 2);
}

}  // namespace wsync
