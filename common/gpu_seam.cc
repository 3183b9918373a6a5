#include "common/gpu_seam.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

absl::string_view ResidentMediumName(ResidentMedium medium) {
  return medium == ResidentMedium::kGpu ? "gpu" : "host";
}

absl::StatusOr<std::vector<std::unique_ptr<SlotMemory>>> Platform::AllocateSlots(int device,
                                                                                 uint32_t count,
                                                                                 uint64_t bytes) {
  std::vector<std::unique_ptr<SlotMemory>> slots;
  for (uint32_t i = 0; i < count; ++i) {
    absl::StatusOr<std::unique_ptr<SlotMemory>> slot = AllocateSlot(device, bytes);
    if (!slot.ok()) return slot.status();
    slots.push_back(std::move(*slot));
  }
  return slots;
}

absl::Status CheckPiecesFit(const SlotMemory& slot, const std::vector<BroadcastPiece>& pieces) {
  for (const BroadcastPiece& p : pieces) {
    // By element count, not count x size, which a huge count wraps past the check.
    const uint64_t room = p.offset > slot.bytes() ? 0 : slot.bytes() - p.offset;
    if (p.offset > slot.bytes() || p.count > room / DTypeSize(p.dtype)) {
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

std::string NormalizeGpuUuid(absl::string_view uuid) {
  std::string out = absl::AsciiStrToLower(uuid);
  if (absl::StartsWith(out, "gpu-")) out.erase(0, 4);
  return out;
}

absl::StatusOr<int> FindDeviceByUuid(const Platform& platform, absl::string_view uuid) {
  absl::StatusOr<std::vector<std::string>> uuids = platform.DeviceUuids();
  if (!uuids.ok()) return uuids.status();
  const std::string wanted = NormalizeGpuUuid(uuid);
  for (size_t i = 0; i < uuids->size(); ++i) {
    if ((*uuids)[i] == wanted) return static_cast<int>(i);
  }
  return absl::NotFoundError(
      absl::StrCat("wsyncd has no device on GPU ", uuid,
                   " (its devices: ", uuids->empty() ? "none" : absl::StrJoin(*uuids, ", "), ")"));
}

absl::StatusOr<std::unique_ptr<PeerCommunicator>> Platform::JoinCommunicator(
    int device, const std::string& unique_id, int rank, int world_size,
    const std::string& nccl_library, absl::Time deadline) {
  return absl::UnimplementedError(
      absl::StrCat("the ", name(), " platform cannot join a communicator as a peer"));
}

}  // namespace wsync
