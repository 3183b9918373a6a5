#include "common/cuda/cuda_source.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"
#include "common/status_macros.h"

namespace wsync::cuda {
namespace {

using PointerGetAttributeFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);

absl::StatusOr<PointerGetAttributeFn> PointerGetAttribute() {
  static PointerGetAttributeFn fn = nullptr;
  static cudaError_t err = cudaSuccess;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    err = cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &p, 12000, cudaEnableDefault,
                                           &found);
    if (err == cudaSuccess && found == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<PointerGetAttributeFn>(p);
    }
  });
  if (fn == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuPointerGetAttribute is not available from the driver (", cudaGetErrorString(err), ")"));
  }
  return fn;
}

struct AllocationRange {
  uintptr_t base;
  uint64_t bytes;
};

// The driver's address range holding [data, data + bytes) on `device`: cheap attribute lookups.
absl::StatusOr<AllocationRange> RangeOf(int device, const void* data, uint64_t bytes) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, data) != cudaSuccess || attr.type != cudaMemoryTypeDevice ||
      attr.device != device) {
    (void)cudaGetLastError();
    return absl::NotFoundError("not device memory of the session's GPU");
  }
  WSYNC_ASSIGN_OR_RETURN(PointerGetAttributeFn get, PointerGetAttribute());
  CUdeviceptr base = 0;
  size_t size = 0;
  const auto ptr = reinterpret_cast<CUdeviceptr>(data);
  if (get(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr) != CUDA_SUCCESS ||
      get(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr) != CUDA_SUCCESS) {
    return absl::NotFoundError("the driver knows no allocation at this address");
  }
  if (ptr - base + bytes > size) {
    return absl::NotFoundError("the tensor runs past its allocation");
  }
  return AllocationRange{static_cast<uintptr_t>(base), size};
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaSource>> CudaSource::Open(int device, const std::string& handle,
                                                             uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(auto mapping, IpcMapping::Open(device, handle));
  return std::unique_ptr<CudaSource>(new CudaSource(std::move(mapping), handle, bytes));
}

absl::StatusOr<uintptr_t> CudaSourceExporter::AllocationStart(const void* data, uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(AllocationRange range, RangeOf(device_, data, bytes));
  return range.base;
}

absl::StatusOr<ExportedSource> CudaSourceExporter::Export(const void* data, uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(AllocationRange range, RangeOf(device_, data, bytes));
  const uintptr_t base = range.base;
  const uint64_t size = range.bytes;
  const auto ptr = reinterpret_cast<uintptr_t>(data);
  auto it = by_base_.find(base);
  if (it == by_base_.end() || checked_.count(base) == 0) {
    WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
    cudaIpcMemHandle_t h;
    if (cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base)); e != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::NotFoundError(
          absl::StrCat("cudaIpcGetMemHandle refused the allocation: ", cudaGetErrorString(e)));
    }
    std::string handle(reinterpret_cast<const char*>(&h), sizeof(h));
    if (it == by_base_.end() || it->second.handle != handle || it->second.bytes != size) {
      // New, or freed and re-made at the same address: a new id, so wsyncd maps it afresh.
      it = by_base_.insert_or_assign(base, Known{next_id_++, std::move(handle), size}).first;
    }
    checked_.insert(base);
  }
  return ExportedSource{it->second.id, it->second.handle, it->second.bytes, ptr - base};
}

}  // namespace wsync::cuda
