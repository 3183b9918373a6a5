#ifndef WSYNC_COMMON_HOST_HOST_PLATFORM_H_
#define WSYNC_COMMON_HOST_HOST_PLATFORM_H_

#include <string>

#include "common/gpu_seam.h"

namespace wsync {

// The seam's host implementation: shared-memory slots and the TCP collective.
class HostPlatform final : public Platform {
 public:
  HostPlatform(std::string bind_address, std::string advertise_address)
      : bind_address_(std::move(bind_address)), advertise_address_(std::move(advertise_address)) {}

  absl::string_view name() const override { return "host"; }
  absl::StatusOr<std::unique_ptr<SlotMemory>> AllocateSlot(int device, uint64_t bytes) override;
  // One shared-memory segment (ShmArena) per call.
  absl::StatusOr<std::vector<std::unique_ptr<SlotMemory>>> AllocateSlots(int device, uint32_t count,
                                                                         uint64_t bytes) override;
  // The host collective never loads NCCL: a group's nccl_library is named in its description.
  absl::StatusOr<std::unique_ptr<RootCommunicator>> CreateRootCommunicator(
      int device, int world_size, const std::string& nccl_library) override;
  // The TCP collective's peer side (HostPeerCommunicator); `nccl_library` is not loaded.
  absl::StatusOr<std::unique_ptr<PeerCommunicator>> JoinCommunicator(
      int device, const std::string& unique_id, int rank, int world_size,
      const std::string& nccl_library, absl::Time deadline) override;
  absl::StatusOr<std::unique_ptr<SourceMemory>> MapSource(int device, const std::string& handle,
                                                          uint64_t bytes,
                                                          const std::string& session_tag) override;
  // Heap memory for either medium (AllocateHostResident).
  absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(int device,
                                                                   ResidentMedium medium,
                                                                   uint64_t bytes) override;
  // kDevices pseudo-GPUs: HostDeviceUuid(0), HostDeviceUuid(1), ...
  absl::StatusOr<std::vector<std::string>> DeviceUuids() const override;

  static constexpr int kDevices = 16;

 private:
  std::string bind_address_;
  std::string advertise_address_;
};

// Host mode's stand-in for a GPU's UUID, shaped like one so that configs and engine simulators
// treat it as they would a real one: "686f7374-0000-0000-0000-000000000003" for device 3 (the
// first group spells "host").
std::string HostDeviceUuid(int device);

}  // namespace wsync

#endif  // WSYNC_COMMON_HOST_HOST_PLATFORM_H_
