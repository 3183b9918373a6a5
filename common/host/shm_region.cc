#include "common/host/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace wsync {
namespace {

absl::Status ErrnoStatus(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<ShmSegment> CreateShm(const std::string& name, uint64_t bytes) {
  UniqueFd fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("shm_open ", name));
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    absl::Status s = ErrnoStatus(absl::StrCat("ftruncate ", name, " to ", bytes, " bytes"));
    ::shm_unlink(name.c_str());
    return s;
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) {
    absl::Status s = ErrnoStatus(absl::StrCat("mmap ", name));
    ::shm_unlink(name.c_str());
    return s;
  }
  return ShmSegment{data, std::move(fd)};
}

absl::StatusOr<ShmSegment> OpenShm(const std::string& name, uint64_t bytes, bool writable) {
  UniqueFd fd(::shm_open(name.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("shm_open ", name));
  absl::StatusOr<uint64_t> size = ShmSize(fd.get());
  if (!size.ok()) return size.status();
  if (*size < bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", name, " is smaller than the announced ", bytes, " bytes"));
  }
  void* data = ::mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                      fd.get(), 0);
  if (data == MAP_FAILED) return ErrnoStatus(absl::StrCat("mmap ", name));
  return ShmSegment{data, std::move(fd)};
}

absl::StatusOr<ShmSegment> OpenTrainerShm(const std::string& name, uint64_t bytes) {
  UniqueFd fd(::shm_open(name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0));
  if (!fd.valid() && errno == ELOOP) {
    return absl::PermissionDeniedError(
        absl::StrCat(name, " is a symbolic link; wsyncd does not follow it"));
  }
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("shm_open ", name));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(absl::StrCat("fstat ", name));
  if (!S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(name, " is not a regular file"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(
        absl::StrCat(name, " is owned by uid ", st.st_uid, ", not by wsyncd's uid ", ::geteuid()));
  }
  if (st.st_nlink != 1) {
    return absl::PermissionDeniedError(absl::StrCat(
        name, " has ", st.st_nlink, " names; a source must be a segment of its own, not a link"));
  }
  if (static_cast<uint64_t>(st.st_size) < bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", name, " is smaller than the announced ", bytes, " bytes"));
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) return ErrnoStatus(absl::StrCat("mmap ", name));
  return ShmSegment{data, std::move(fd)};
}

absl::StatusOr<uint64_t> ShmSize(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus("fstat of a shared-memory segment");
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace wsync
