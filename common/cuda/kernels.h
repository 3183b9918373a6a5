#ifndef WSYNC_COMMON_CUDA_KERNELS_H_
#define WSYNC_COMMON_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace wsync::cuda {

struct CopyItem {
  const void* src;
  void* dst;
  uint64_t bytes;
};

// Copies every (src, dst, bytes) in one kernel launch on `stream`, so a bucket of thousands of
// tensors costs one launch. Pointers are device (or peer-mapped) addresses. `scratch` keeps the
// work list alive on the device until the stream has run it.
absl::Status BatchedCopy(const std::vector<CopyItem>& items, cudaStream_t stream,
                         std::vector<uint8_t>* scratch_host, void** scratch_device,
                         size_t* scratch_capacity);

// CRC-32 (zlib's) of device memory: chunks in parallel on the GPU, combined on the host; equal to
// wsync::Crc32 over the same bytes. Synchronises `stream`.
absl::StatusOr<uint32_t> DeviceCrc32(const void* data, uint64_t bytes, cudaStream_t stream);

// The same value through a kernel whose loads are coalesced (a warp reads 512 contiguous bytes at
// a time); see tests/gpu/kernel_bench for which is faster on a given GPU.
absl::StatusOr<uint32_t> DeviceCrc32Coalesced(const void* data, uint64_t bytes,
                                              cudaStream_t stream);

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_KERNELS_H_
