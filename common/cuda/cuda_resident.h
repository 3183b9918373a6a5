#ifndef WSYNC_COMMON_CUDA_CUDA_RESIDENT_H_
#define WSYNC_COMMON_CUDA_CUDA_RESIDENT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/gpu_seam.h"

namespace wsync::cuda {

// A resident bucket on a GPU (cudaMalloc on `device`) or in pinned host memory (cudaMallocHost,
// so the copies run at the link's rate), freed with the object. Copies are cudaMemcpy with the
// direction read from the pointers (unified addressing) on the default stream, waited for (a
// device-to-device cudaMemcpy returns before it is done): they return when done.
class CudaResident final : public ResidentMemory {
 public:
  static absl::StatusOr<std::unique_ptr<CudaResident>> Create(int device, ResidentMedium medium,
                                                              uint64_t bytes);
  ~CudaResident() override;
  CudaResident(const CudaResident&) = delete;
  CudaResident& operator=(const CudaResident&) = delete;

  ResidentMedium medium() const override { return medium_; }
  uint64_t bytes() const override { return bytes_; }
  absl::Status CopyFromSlot(SlotMemory& slot) override;
  absl::Status CopyToSlot(SlotMemory& slot) override;
  const uint8_t* host_data() const override {
    return medium_ == ResidentMedium::kHost ? static_cast<const uint8_t*>(data_) : nullptr;
  }

 private:
  CudaResident(int device, ResidentMedium medium, void* data, uint64_t bytes)
      : device_(device), medium_(medium), data_(data), bytes_(bytes) {}
  absl::Status Fits(const SlotMemory& slot) const;

  const int device_;
  const ResidentMedium medium_;
  void* const data_;
  const uint64_t bytes_;
};

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_CUDA_RESIDENT_H_
