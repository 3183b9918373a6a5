#include "common/cuda/cuda_resident.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_resources.h"
#include "common/cuda/cuda_status.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace wsync::cuda {

absl::StatusOr<std::unique_ptr<CudaResident>> CudaResident::Create(int device,
                                                                   ResidentMedium medium,
                                                                   uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  void* p = nullptr;
  const size_t size = bytes == 0 ? 1 : bytes;
  const cudaError_t err =
      medium == ResidentMedium::kGpu ? cudaMalloc(&p, size) : cudaMallocHost(&p, size);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: the next call must not see it
    return absl::ResourceExhaustedError(
        absl::StrCat("no room for a resident bucket of ", bytes, " bytes in ",
                     medium == ResidentMedium::kGpu ? absl::StrCat("GPU ", device, "'s memory")
                                                    : "pinned host memory"));
  }
  if (err != cudaSuccess) return WSYNC_CUDA_STATUS(err);
  return std::unique_ptr<CudaResident>(new CudaResident(device, medium, p, bytes));
}

CudaResident::~CudaResident() {
  auto guard = DeviceGuard::Create(device_);
  // A destructor cannot return the error; it logs it, so a leak is at least seen.
  const cudaError_t err = medium_ == ResidentMedium::kGpu ? cudaFree(data_) : cudaFreeHost(data_);
  if (err != cudaSuccess) {
    WSYNC_LOG(Warning, "freeing a resident bucket failed: ", cudaGetErrorString(err));
  }
}

absl::Status CudaResident::Fits(const SlotMemory& slot) const {
  if (slot.bytes() >= bytes_) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat("a resident bucket of ", bytes_,
                                            " bytes does not fit a slot of ", slot.bytes()));
}

absl::Status CudaResident::CopyFromSlot(SlotMemory& slot) {
  WSYNC_RETURN_IF_ERROR(Fits(slot));
  // After whatever wrote the slot (a receive, a trainer's copy) has finished.
  WSYNC_RETURN_IF_ERROR(slot.WaitProducer(absl::Minutes(1)));
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpy(data_, slot.data(), bytes_, cudaMemcpyDefault));
  // A device-to-device cudaMemcpy returns before the copy is done: wait for it.
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
  return absl::OkStatus();
}

absl::Status CudaResident::CopyToSlot(SlotMemory& slot) {
  WSYNC_RETURN_IF_ERROR(Fits(slot));
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpy(slot.data(), data_, bytes_, cudaMemcpyDefault));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
  return absl::OkStatus();
}

}  // namespace wsync::cuda
