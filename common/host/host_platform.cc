#include "common/host/host_platform.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/host/host_collective.h"
#include "common/host/host_peer_communicator.h"
#include "common/host/host_resident.h"
#include "common/host/host_source.h"
#include "common/host/shm_slot.h"

namespace wsync {

std::string HostDeviceUuid(int device) {
  return absl::StrFormat("686f7374-0000-0000-0000-%012d", device);
}

absl::StatusOr<std::vector<std::string>> HostPlatform::DeviceUuids() const {
  std::vector<std::string> uuids;
  for (int d = 0; d < kDevices; ++d) uuids.push_back(HostDeviceUuid(d));
  return uuids;
}

absl::StatusOr<std::unique_ptr<SourceMemory>> HostPlatform::MapSource(
    int device, const std::string& handle, uint64_t bytes, const std::string& session_tag) {
  return MapHostSource(handle, bytes, session_tag);
}

absl::StatusOr<std::unique_ptr<SlotMemory>> HostPlatform::AllocateSlot(int device, uint64_t bytes) {
  auto slot = ShmSlot::Create(device, bytes);
  if (!slot.ok()) return slot.status();
  return std::unique_ptr<SlotMemory>(std::move(*slot));
}

absl::StatusOr<std::vector<std::unique_ptr<SlotMemory>>> HostPlatform::AllocateSlots(
    int device, uint32_t count, uint64_t bytes) {
  auto slots = ShmSlot::CreateRegions(device, count, bytes);
  if (!slots.ok()) return slots.status();
  std::vector<std::unique_ptr<SlotMemory>> out;
  for (auto& slot : *slots) out.push_back(std::move(slot));
  return out;
}

absl::StatusOr<std::unique_ptr<RootCommunicator>> HostPlatform::CreateRootCommunicator(
    int device, int world_size, const std::string& nccl_library) {
  auto comm = HostRootCommunicator::Create(bind_address_, advertise_address_, world_size);
  if (!comm.ok()) return comm.status();
  if (!nccl_library.empty()) {
    (*comm)->set_note(
        absl::StrCat("the group's NCCL ", nccl_library, " is not loaded in host mode"));
  }
  return std::unique_ptr<RootCommunicator>(std::move(*comm));
}

absl::StatusOr<std::unique_ptr<PeerCommunicator>> HostPlatform::JoinCommunicator(
    int device, const std::string& unique_id, int rank, int world_size,
    const std::string& nccl_library, absl::Time deadline) {
  if (device < 0 || device >= kDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("host device ", device, " is not one of 0..", kDevices - 1));
  }
  auto comm = HostPeerCommunicator::Join(unique_id, rank, world_size, deadline);
  if (!comm.ok()) return comm.status();
  return std::unique_ptr<PeerCommunicator>(std::move(*comm));
}

absl::StatusOr<std::unique_ptr<ResidentMemory>> HostPlatform::AllocateResident(
    int device, ResidentMedium medium, uint64_t bytes) {
  if (device < 0 || device >= kDevices) {
    return absl::InvalidArgumentError(absl::StrCat("no host-mode device ", device));
  }
  return AllocateHostResident(medium, bytes);
}

}  // namespace wsync
