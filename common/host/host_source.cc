#include "common/host/host_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace wsync {
namespace {

struct Registered {
  uint64_t bytes;
  std::string name;
  uint64_t id;
};

// Live arenas by start address.
std::mutex g_arenas_mu;
std::map<uintptr_t, Registered>& Arenas() {
  static auto* arenas = new std::map<uintptr_t, Registered>();
  return *arenas;
}
std::atomic<uint64_t> g_next_id{1};

absl::Status ErrnoStatus(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

class ShmSource final : public SourceMemory {
 public:
  ShmSource(void* data, uint64_t bytes) : data_(data), bytes_(bytes) {}
  ~ShmSource() override { ::munmap(data_, bytes_); }
  const void* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  void* data_;
  uint64_t bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HostSourceArena>> HostSourceArena::Create(uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("arena size must be positive");
  const uint64_t id = g_next_id.fetch_add(1);
  std::string name = absl::StrFormat("/wsync-src-%d-%u", static_cast<int>(::getpid()), id);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(absl::StrCat("shm_open ", name));
  void* data = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  if (data == MAP_FAILED) {
    absl::Status s = ErrnoStatus(absl::StrCat("shared memory ", name, " of ", bytes, " bytes"));
    ::shm_unlink(name.c_str());
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(g_arenas_mu);
    Arenas()[reinterpret_cast<uintptr_t>(data)] = Registered{bytes, name, id};
  }
  return std::unique_ptr<HostSourceArena>(new HostSourceArena(std::move(name), data, bytes));
}

HostSourceArena::~HostSourceArena() {
  {
    std::lock_guard<std::mutex> lock(g_arenas_mu);
    Arenas().erase(reinterpret_cast<uintptr_t>(data_));
  }
  ::munmap(data_, bytes_);
  ::shm_unlink(name_.c_str());
}

absl::StatusOr<ExportedSource> HostSourceExporter::Export(const void* data, uint64_t bytes) {
  const auto p = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(g_arenas_mu);
  auto it = Arenas().upper_bound(p);
  if (it != Arenas().begin()) {
    --it;
    if (p - it->first + bytes <= it->second.bytes) {
      return ExportedSource{it->second.id, it->second.name, it->second.bytes, p - it->first};
    }
  }
  return absl::NotFoundError("not in a shared-memory source arena");
}

absl::StatusOr<std::unique_ptr<SourceMemory>> MapHostSource(const std::string& name,
                                                            uint64_t bytes) {
  if (name.empty() || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a shared-memory name"));
  }
  int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus(absl::StrCat("shm_open ", name));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes || bytes == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("shared memory ", name, " holds ", st.st_size,
                                                   " bytes, not the announced ", bytes));
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (data == MAP_FAILED) return ErrnoStatus(absl::StrCat("mmap ", name));
  return std::unique_ptr<SourceMemory>(new ShmSource(data, bytes));
}

}  // namespace wsync
