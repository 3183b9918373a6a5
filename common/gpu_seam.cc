#include "common/gpu_seam.h"

#include "absl/status/status.h"

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

absl::Status CheckPiecesFit(const SlotMemory& slot, const std::vector<BroadcastPiece>& pieces) {
  for (const BroadcastPiece& p : pieces) {
    if (p.offset > slot.bytes() || p.bytes() > slot.bytes() - p.offset) {
      return absl::OutOfRangeError("broadcast range exceeds the slot");
    }
  }
  return absl::OkStatus();
}

}  // namespace wsync
