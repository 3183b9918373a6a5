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

absl::StatusOr<void*> CreateShm(const std::string& name, uint64_t bytes) {
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
  return data;
}

absl::StatusOr<void*> OpenShm(const std::string& name, uint64_t bytes, bool writable) {
  int fd = ::shm_open(name.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus(absl::StrCat("shm_open ", name));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", name, " is smaller than the announced ", bytes, " bytes"));
  }
  void* data =
      ::mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (data == MAP_FAILED) return ErrnoStatus(absl::StrCat("mmap ", name));
  return data;
}

}  // namespace wsync
