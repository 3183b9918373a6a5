#ifndef WSYNC_COMMON_CUDA_GROWN_BUFFERS_H_
#define WSYNC_COMMON_CUDA_GROWN_BUFFERS_H_

// Work memory of the delta codecs: grown to what a bucket needs, kept for the next one, freed
// with its owner. Growing frees the old memory first (the owner has synchronised its stream).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

#include "absl/status/status.h"
#include "common/cuda/cuda_status.h"

namespace wsync::cuda {

// Memory from `Allocate`, freed by `Free`, that grows to what a bucket needs and is kept for the
// next one.
template <cudaError_t (*Allocate)(void**, size_t), cudaError_t (*Free)(void*)>
class GrownBuffer {
 public:
  GrownBuffer() = default;
  GrownBuffer(const GrownBuffer&) = delete;
  GrownBuffer& operator=(const GrownBuffer&) = delete;
  ~GrownBuffer() { Free(data_); }
  absl::Status Reserve(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    const size_t want = std::max(bytes, bytes_ * 2);
    Free(data_);
    data_ = nullptr;
    bytes_ = 0;
    WSYNC_CUDA_RETURN_IF_ERROR(Allocate(&data_, want));
    bytes_ = want;
    return absl::OkStatus();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  unsigned char* at(size_t offset) const { return static_cast<unsigned char*>(data_) + offset; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Device memory: the kernels' work arrays.
using DeviceArray = GrownBuffer<cudaMalloc, cudaFree>;
// Pinned host memory: what crosses PCIe between the passes (the plan, the counts, the headers)
// is copied from and into it without the driver's staging.
using PinnedArray = GrownBuffer<cudaMallocHost, cudaFreeHost>;

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_GROWN_BUFFERS_H_
