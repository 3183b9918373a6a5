#include "common/host/host_resident.h"

#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace wsync {
namespace {

class HostResident final : public ResidentMemory {
 public:
  HostResident(ResidentMedium medium, std::unique_ptr<char[]> data, uint64_t bytes)
      : medium_(medium), data_(std::move(data)), bytes_(bytes) {}
  ResidentMedium medium() const override { return medium_; }
  uint64_t bytes() const override { return bytes_; }
  const uint8_t* host_data() const override {
    return reinterpret_cast<const uint8_t*>(data_.get());
  }
  absl::Status CopyFromSlot(SlotMemory& slot) override {
    WSYNC_RETURN_IF_ERROR(Fits(slot));
    WSYNC_RETURN_IF_ERROR(slot.CheckIntact());
    std::memcpy(data_.get(), slot.data(), bytes_);
    return absl::OkStatus();
  }
  absl::Status CopyToSlot(SlotMemory& slot) override {
    WSYNC_RETURN_IF_ERROR(Fits(slot));
    WSYNC_RETURN_IF_ERROR(slot.CheckIntact());
    std::memcpy(slot.data(), data_.get(), bytes_);
    return absl::OkStatus();
  }

 private:
  absl::Status Fits(const SlotMemory& slot) const {
    if (slot.bytes() >= bytes_) return absl::OkStatus();
    return absl::OutOfRangeError(absl::StrCat("a resident bucket of ", bytes_,
                                              " bytes does not fit a slot of ", slot.bytes()));
  }
  const ResidentMedium medium_;
  std::unique_ptr<char[]> data_;
  const uint64_t bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateHostResident(ResidentMedium medium,
                                                                     uint64_t bytes) {
  std::unique_ptr<char[]> data(new (std::nothrow) char[bytes == 0 ? 1 : bytes]);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no host memory for a resident bucket of ", bytes, " bytes"));
  }
  return std::make_unique<HostResident>(medium, std::move(data), bytes);
}

}  // namespace wsync
