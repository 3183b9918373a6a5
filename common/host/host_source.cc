#include "common/host/host_source.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/host/shm_names.h"
#include "common/host/shm_region.h"
#include "common/status_macros.h"

namespace wsync {
namespace {

struct Registered {
  uint64_t bytes;
  std::string name;
  uint64_t id;
  std::string session_tag;
};

// Live arenas by start address.
std::mutex g_arenas_mu;
std::map<uintptr_t, Registered>& Arenas() {
  static auto* arenas = new std::map<uintptr_t, Registered>();
  return *arenas;
}
std::atomic<uint64_t> g_next_id{1};

// The trainer made the segment and can truncate it under wsyncd: wsyncd keeps the descriptor to
// see that (fstat) before the kernel reads the mapping, and reads it itself only under a guard.
class ShmSource final : public SourceMemory {
 public:
  ShmSource(std::string name, ShmSegment segment, uint64_t bytes)
      : name_(std::move(name)), data_(segment.data), fd_(std::move(segment.fd)), bytes_(bytes) {}
  ~ShmSource() override { ::munmap(data_, bytes_); }
  const void* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }
  std::string Describe() const override { return absl::StrCat("pull source ", name_); }
  MemoryKind kind() const override { return MemoryKind::kHostShm; }
  const std::string& memory_handle() const override { return name_; }
  absl::Status CheckIntact() const override {
    WSYNC_ASSIGN_OR_RETURN(uint64_t size, ShmSize(fd_.get()));
    if (size >= bytes_) return absl::OkStatus();
    return absl::DataLossError(
        absl::StrCat(Describe(), " shrank under wsyncd to ", size, " of the ", bytes_,
                     " bytes it was mapped with (the trainer truncated it)"));
  }

 private:
  std::string name_;
  void* data_;
  UniqueFd fd_;
  uint64_t bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HostSourceArena>> HostSourceArena::Create(
    const std::string& session_tag, uint64_t bytes) {
  WSYNC_RETURN_IF_ERROR(CheckSessionTag(session_tag));
  if (bytes == 0) return absl::InvalidArgumentError("arena size must be positive");
  const uint64_t id = g_next_id.fetch_add(1);
  std::string name = SourceShmName(session_tag);
  WSYNC_ASSIGN_OR_RETURN(ShmSegment segment, CreateShm(name, bytes));
  void* data = segment.data;
  {
    std::lock_guard<std::mutex> lock(g_arenas_mu);
    Arenas()[reinterpret_cast<uintptr_t>(data)] = Registered{bytes, name, id, session_tag};
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
    if (p - it->first + bytes <= it->second.bytes && it->second.session_tag == session_tag_) {
      return ExportedSource{it->second.id, it->second.name, it->second.bytes, p - it->first};
    }
  }
  return absl::NotFoundError("not in a shared-memory source arena of this session");
}

absl::StatusOr<uintptr_t> HostSourceExporter::AllocationStart(const void* data, uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(ExportedSource e, Export(data, bytes));
  return reinterpret_cast<uintptr_t>(data) - e.offset;
}

absl::StatusOr<std::unique_ptr<SourceMemory>> MapHostSource(const std::string& name, uint64_t bytes,
                                                            const std::string& session_tag) {
  if (!IsSourceShmNameOf(name, session_tag)) {
    // The name is the peer's: escaped, and cut to what a shared-memory name may be.
    return absl::PermissionDeniedError(absl::StrCat(
        "pull source '", absl::CHexEscape(absl::string_view(name).substr(0, 255)),
        "' was not made by this session's client: its sources are named /wsync-<pid>-src-",
        session_tag,
        "-<n> (HostSourceArena), and wsyncd reads no slot, other session's memory "
        "or other file for it"));
  }
  if (bytes == 0) return absl::InvalidArgumentError("an arena holds at least one byte");
  absl::StatusOr<ShmSegment> segment = OpenTrainerShm(name, bytes);
  if (segment.status().code() == absl::StatusCode::kPermissionDenied) {
    return absl::PermissionDeniedError(absl::StrCat("pull source ", segment.status().message()));
  }
  if (!segment.ok()) return segment.status();
  return std::unique_ptr<SourceMemory>(new ShmSource(name, std::move(*segment), bytes));
}

}  // namespace wsync
