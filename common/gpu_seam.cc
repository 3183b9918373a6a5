#include "common/gpu_seam.h"

namespace wsync {

absl::string_view MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHostShm:
      return "host-shm";
    case MemoryKind::kCudaIpc:
      return "cuda-ipc";
  }
  return "unknown";
}

}  // namespace wsync
