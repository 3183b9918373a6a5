#ifndef WSYNC_DAEMON_CORE_SOURCE_TABLE_H_
#define WSYNC_DAEMON_CORE_SOURCE_TABLE_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"

namespace wsync {

// Pull mode, as a bucket names it: allocations announced by the trainer, and where each tensor is.
struct AllocationAnnounce {
  uint64_t id = 0;
  std::string handle;
  uint64_t bytes = 0;
};
struct TensorSourceRef {
  uint64_t allocation = 0;
  uint64_t offset = 0;
};

// What a pull bucket copies, and the mappings its pieces point into (held until the copy is done,
// even if the trainer re-announces the allocation meanwhile).
struct PulledSources {
  std::vector<SourcePiece> pieces;
  std::vector<std::shared_ptr<SourceMemory>> keep;
};

// One session's trainer allocations mapped into wsyncd, by the client's id. Mappings live as long
// as the session: an announcement with the same handle reuses the mapping (opening one costs a
// driver call and address space), a different handle replaces it. Only allocations the session's
// own client made are mapped (Platform::MapSource, with the session's tag).
class SourceTable {
 public:
  SourceTable(Platform* platform, int device, std::string session_tag)
      : platform_(platform), device_(device), session_tag_(std::move(session_tag)) {}

  // Maps what is announced, then resolves each tensor of the manifest (in order) to a piece of
  // that allocation. INVALID_ARGUMENT names the tensor or allocation at fault, PERMISSION_DENIED an
  // allocation the session's client did not make; nothing is copied.
  absl::StatusOr<PulledSources> Resolve(const std::vector<AllocationAnnounce>& announced,
                                        const std::vector<TensorSourceRef>& sources,
                                        const BucketManifest& manifest);
  size_t mapped() const;

 private:
  struct Entry {
    std::string handle;
    uint64_t bytes;
    std::shared_ptr<SourceMemory> memory;
  };
  Platform* platform_;
  int device_;
  const std::string session_tag_;
  mutable std::mutex mu_;
  std::map<uint64_t, Entry> entries_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_SOURCE_TABLE_H_
