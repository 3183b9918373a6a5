#ifndef WSYNC_COMMON_CUDA_CUDA_PLATFORM_H_
#define WSYNC_COMMON_CUDA_CUDA_PLATFORM_H_

// The seam's CUDA implementation, behind an interface that needs no CUDA headers, so the daemon
// and the client can create it without seeing CUDA or NCCL.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/gpu_seam.h"

namespace wsync::cuda {

struct CudaPlatformOptions {
  std::string nccl_library = "libnccl.so.2";
};

// Fails (never falls back) when no CUDA device is visible or NCCL cannot be loaded.
absl::StatusOr<std::unique_ptr<Platform>> CreateCudaPlatform(const CudaPlatformOptions& options,
                                                             std::string* description);

// The trainer's exporter of its tensors' allocations for pull mode.
std::unique_ptr<SourceExporter> CreateCudaSourceExporter(int device);

// Maps one of wsyncd's allocations (a cudaIpcMemHandle_t of `bytes`). A process may open an
// allocation only once: the slots that are regions of it share this mapping (MapCudaSlot).
absl::StatusOr<std::shared_ptr<MappedAllocation>> MapCudaAllocation(
    int device, const std::string& memory_handle, uint64_t bytes);

// The slot of `bytes` at `offset` in a mapped allocation, with its interprocess event.
absl::StatusOr<std::unique_ptr<MappedSlot>> MapCudaSlot(
    int device, std::shared_ptr<MappedAllocation> allocation, uint64_t offset, uint64_t bytes,
    const std::string& event_handle);

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_CUDA_PLATFORM_H_
