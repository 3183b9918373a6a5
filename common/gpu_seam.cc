#include "common/gpu_seam.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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

absl::Status CheckFillFits(const SlotMemory& slot, const std::vector<SourcePiece>& pieces,
                           uint64_t span) {
  if (span > slot.bytes()) return absl::OutOfRangeError("checksum range exceeds the slot");
  for (const SourcePiece& p : pieces) {
    if (p.offset > span || p.bytes > span - p.offset) {
      return absl::OutOfRangeError(absl::StrCat("piece of ", p.bytes, " bytes at ", p.offset,
                                                " exceeds the bucket of ", span, " bytes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace wsync
