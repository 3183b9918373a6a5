#ifndef WSYNC_DAEMON_CORE_BUFFER_POOL_H_
#define WSYNC_DAEMON_CORE_BUFFER_POOL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gpu_seam.h"

namespace wsync {

// kFilling: leased, the client may write it. kQueued: a bucket names it and waits to be sent.
// kSending: on the wire. After sending it returns to kFilling (the client gets SlotFree).
enum class SlotState { kFree, kFilling, kQueued, kSending };

absl::string_view SlotStateName(SlotState state);

struct SlotRow {
  int device = 0;
  uint32_t index = 0;
  uint64_t bytes = 0;
  MemoryKind kind = MemoryKind::kHostShm;
  std::string owner_session;
  SlotState state = SlotState::kFree;
};

// What one device's slots hold, for operators (wsyncctl buffers).
struct DeviceMemoryRow {
  int device = 0;
  // Every allocation there (the regular slots' one and the oversize slot's); 0 once released.
  uint64_t bytes_held = 0;
  uint32_t slots = 0;
  std::string holder;        // the session holding them, empty when free
  uint64_t allocations = 0;  // times the slots were made (1 + re-made after releases)
  uint64_t releases = 0;     // times they were released for training's memory
};

// What a release freed.
struct ReleaseResult {
  std::vector<int> released;  // devices whose slots were freed
  uint64_t bytes = 0;
  std::vector<std::string> busy;  // devices skipped: "device N (session S)"
};

// The daemon's slots: allocated per device on first use, exported once and reused while kept.
// Colocated training may need the memory back between updates: slots no session holds can be
// released (ReleaseIdle) and are made afresh by the next session on the device.
class BufferPool {
 public:
  BufferPool(Platform* platform, uint32_t slots_per_device, uint64_t slot_bytes)
      : platform_(platform), slots_per_device_(slots_per_device), slot_bytes_(slot_bytes) {}

  // Leases every slot of the device to the session.
  absl::StatusOr<std::vector<SlotMemory*>> Lease(int device, const std::string& session);
  void Release(int device, const std::string& session);
  // The session's slot `index` (a regular slot, or the oversize slot after them).
  absl::StatusOr<SlotMemory*> Get(int device, uint32_t index, const std::string& session) const;
  // Leases the device's oversize slot (index slots_per_device) with room for `bytes`: one tensor
  // larger than a slot travels alone in it. It is allocated on first need, kept for later updates
  // and sessions, and regrown only while nothing is queued in it.
  absl::StatusOr<std::pair<uint32_t, SlotMemory*>> LeaseOversize(int device,
                                                                 const std::string& session,
                                                                 uint64_t bytes);
  // Moves a slot from `from` to `to` if the session holds it and it is in `from`.
  absl::Status Transition(int device, uint32_t index, const std::string& session, SlotState from,
                          SlotState to);
  // Returns every queued/sending slot of the session to kFilling.
  void ResetSession(int device, const std::string& session);
  std::vector<SlotRow> Snapshot() const;
  // Frees the slots of `device` (every device when negative) where no session holds them; the
  // next Lease on such a device makes them afresh (new memory, new handles).
  ReleaseResult ReleaseIdle(int device);
  // One row per device that has had slots, released ones included.
  std::vector<DeviceMemoryRow> Devices() const;
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint32_t slots_per_device() const { return slots_per_device_; }
  size_t slot_count() const;

 private:
  struct Slot {
    std::unique_ptr<SlotMemory> memory;
    std::string owner;
    SlotState state = SlotState::kFree;
  };
  Platform* platform_;
  const uint32_t slots_per_device_;
  const uint64_t slot_bytes_;
  mutable std::mutex mu_;
  std::map<int, std::vector<Slot>> devices_;
  struct DeviceCounts {
    uint64_t allocations = 0;
    uint64_t releases = 0;
  };
  std::map<int, DeviceCounts> counts_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_BUFFER_POOL_H_
