#include "daemon/core/buffer_pool.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace wsync {

absl::string_view SlotStateName(SlotState state) {
  switch (state) {
    case SlotState::kFree:
      return "free";
    case SlotState::kFilling:
      return "filling";
    case SlotState::kQueued:
      return "queued";
    case SlotState::kSending:
      return "sending";
  }
  return "unknown";
}

absl::StatusOr<std::vector<SlotMemory*>> BufferPool::Lease(int device, const std::string& session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = devices_.find(device);
  if (it == devices_.end()) {
    // One allocation for the device's regular slots (Platform::AllocateSlots): clients and
    // engines map it once, and an engine that caches one tensor per GPU views every slot in it.
    auto memory = platform_->AllocateSlots(device, slots_per_device_, slot_bytes_);
    if (!memory.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("allocating ", slots_per_device_, " slots of ", slot_bytes_,
                       " bytes on device ", device, " failed: ", memory.status().message()));
    }
    if (memory->size() != slots_per_device_) {
      return absl::InternalError(
          absl::StrCat("the platform made ", memory->size(), " slots of ", slots_per_device_));
    }
    std::vector<Slot> slots(slots_per_device_);
    for (uint32_t i = 0; i < slots_per_device_; ++i) slots[i].memory = std::move((*memory)[i]);
    WSYNC_LOG(Info, "allocated ", slots_per_device_, " slots of ", slot_bytes_, " bytes on device ",
              device, " (", platform_->name(), "), regions of one allocation of ",
              slots[0].memory->allocation_bytes(), " bytes");
    ++counts_[device].allocations;
    it = devices_.emplace(device, std::move(slots)).first;
  }
  for (const Slot& s : it->second) {
    if (!s.owner.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the slots of device ", device, " are held by session ", s.owner,
                       "; one trainer process per device may hold a session (close it or let its "
                       "lease expire)"));
    }
  }
  std::vector<SlotMemory*> out;
  for (Slot& s : it->second) {
    // A trainer can shrink a host slot it mapped; one whose bucket never read past the cut left
    // it shrunk, and the next trainer could not map it. Each session starts with whole slots.
    if (absl::Status intact = s.memory->CheckIntact(); !intact.ok()) {
      WSYNC_LOG(Warning, "slot of device ", device, " leased to session ", session, ": ",
                intact.message());
    }
    s.owner = session;
    s.state = SlotState::kFilling;
    // The oversize slot (if one was made) is held too but handed out by LeaseOversize.
    if (out.size() < slots_per_device_) out.push_back(s.memory.get());
  }
  return out;
}

absl::StatusOr<SlotMemory*> BufferPool::Get(int device, uint32_t index,
                                            const std::string& session) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = devices_.find(device);
  if (it == devices_.end() || index >= it->second.size() || it->second[index].owner != session) {
    return absl::FailedPreconditionError(
        absl::StrCat("slot ", index, " is not held by session ", session, " (it holds 0..",
                     it == devices_.end() ? 0 : it->second.size() - 1, ")"));
  }
  return it->second[index].memory.get();
}

absl::StatusOr<std::pair<uint32_t, SlotMemory*>> BufferPool::LeaseOversize(
    int device, const std::string& session, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = devices_.find(device);
  if (it == devices_.end() || it->second.empty() || it->second[0].owner != session) {
    return absl::FailedPreconditionError(
        absl::StrCat("session ", session, " does not hold the slots of device ", device));
  }
  std::vector<Slot>& slots = it->second;
  const uint32_t index = slots_per_device_;
  if (slots.size() > index && slots[index].memory->bytes() >= bytes) {
    slots[index].owner = session;
    if (slots[index].state == SlotState::kFree) slots[index].state = SlotState::kFilling;
    return std::make_pair(index, slots[index].memory.get());
  }
  if (slots.size() > index && slots[index].state != SlotState::kFilling &&
      slots[index].state != SlotState::kFree) {
    return absl::FailedPreconditionError(
        absl::StrCat("the oversize slot is ", SlotStateName(slots[index].state),
                     "; wait for its SlotFree before asking for a larger one"));
  }
  // Rounded up so a slightly larger tensor next time does not reallocate.
  constexpr uint64_t kRound = 64ull << 20;
  const uint64_t size = (bytes + kRound - 1) / kRound * kRound;
  if (slots.size() > index) slots.pop_back();  // the old one is freed before the new is made
  auto memory = platform_->AllocateSlot(device, size);
  if (!memory.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat("allocating the oversize slot of ", size,
                                                     " bytes on device ", device,
                                                     " failed: ", memory.status().message()));
  }
  WSYNC_LOG(Info, "allocated the oversize slot of ", size, " bytes on device ", device);
  Slot slot;
  slot.memory = std::move(*memory);
  slot.owner = session;
  slot.state = SlotState::kFilling;
  slots.push_back(std::move(slot));
  return std::make_pair(index, slots[index].memory.get());
}

void BufferPool::Release(int device, const std::string& session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = devices_.find(device);
  if (it == devices_.end()) return;
  for (Slot& s : it->second) {
    if (s.owner == session) {
      s.owner.clear();
      s.state = SlotState::kFree;
    }
  }
}

absl::Status BufferPool::Transition(int device, uint32_t index, const std::string& session,
                                    SlotState from, SlotState to) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = devices_.find(device);
  if (it == devices_.end() || index >= it->second.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("slot ", index, " is not held by session ", session, " (it holds slots 0..",
                     slots_per_device_ - 1, " of device ", device, ")"));
  }
  Slot& s = it->second[index];
  if (s.owner != session) {
    return absl::FailedPreconditionError(
        absl::StrCat("slot ", index, " of device ", device, " is not held by session ", session));
  }
  if (s.state != from) {
    return absl::FailedPreconditionError(absl::StrCat(
        "slot ", index, " is ", SlotStateName(s.state), ", not ", SlotStateName(from),
        (from == SlotState::kFilling ? "; wait for its SlotFree before reusing it" : "")));
  }
  s.state = to;
  return absl::OkStatus();
}

void BufferPool::ResetSession(int device, const std::string& session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = devices_.find(device);
  if (it == devices_.end()) return;
  for (Slot& s : it->second) {
    if (s.owner == session) s.state = SlotState::kFilling;
  }
}

std::vector<SlotRow> BufferPool::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SlotRow> rows;
  for (const auto& [device, slots] : devices_) {
    for (uint32_t i = 0; i < slots.size(); ++i) {
      rows.push_back(SlotRow{device, i, slots[i].memory->bytes(), slots[i].memory->kind(),
                             slots[i].owner, slots[i].state});
    }
  }
  return rows;
}

namespace {

// The session holding a device's slots, empty when none does.
template <typename Slots>
std::string HolderOf(const Slots& slots) {
  for (const auto& s : slots) {
    if (!s.owner.empty()) return s.owner;
  }
  return "";
}

// The bytes behind a device's slots, each allocation once (the regular slots are regions of one).
template <typename Slots>
uint64_t AllocatedBytes(const Slots& slots) {
  uint64_t bytes = 0;
  for (const auto& s : slots) {
    if (s.memory->allocation_offset() == 0) bytes += s.memory->allocation_bytes();
  }
  return bytes;
}

}  // namespace

ReleaseResult BufferPool::ReleaseIdle(int device) {
  ReleaseResult result;
  std::vector<std::unique_ptr<SlotMemory>> freed;  // freed after the lock is dropped
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = devices_.begin(); it != devices_.end();) {
      if (device >= 0 && it->first != device) {
        ++it;
        continue;
      }
      const std::string holder = HolderOf(it->second);
      if (!holder.empty()) {
        result.busy.push_back(absl::StrCat("device ", it->first, " (session ", holder, ")"));
        ++it;
        continue;
      }
      result.bytes += AllocatedBytes(it->second);
      for (Slot& s : it->second) freed.push_back(std::move(s.memory));
      result.released.push_back(it->first);
      ++counts_[it->first].releases;
      it = devices_.erase(it);
    }
  }
  freed.clear();
  for (int d : result.released) {
    WSYNC_LOG(Info, "released the slots of device ", d, "; the next session there makes them anew");
  }
  return result;
}

std::vector<DeviceMemoryRow> BufferPool::Devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DeviceMemoryRow> rows;
  for (const auto& [device, counts] : counts_) {
    DeviceMemoryRow row;
    row.device = device;
    row.allocations = counts.allocations;
    row.releases = counts.releases;
    auto it = devices_.find(device);
    if (it != devices_.end()) {
      row.slots = static_cast<uint32_t>(it->second.size());
      row.bytes_held = AllocatedBytes(it->second);
      row.holder = HolderOf(it->second);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

size_t BufferPool::slot_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [device, slots] : devices_) n += slots.size();
  return n;
}

}  // namespace wsync
