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

// Device memory that grows to what a bucket needs and is kept for the next one.
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(data_); }
  absl::Status Reserve(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    const size_t want = std::max(bytes, bytes_ * 2);
    cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(&data_, want));
    bytes_ = want;
    return absl::OkStatus();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Pinned host memory, grown as needed: what crosses PCIe between the passes (the plan, the
// counts, the headers) is copied from and into it without the driver's staging.
class PinnedArray {
 public:
  PinnedArray() = default;
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  ~PinnedArray() { cudaFreeHost(data_); }
  absl::Status Reserve(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    const size_t want = std::max(bytes, bytes_ * 2);
    cudaFreeHost(data_);
    data_ = nullptr;
    bytes_ = 0;
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&data_, want));
    bytes_ = want;
    return absl::OkStatus();
  }
  unsigned char* at(size_t offset) const { return static_cast<unsigned char*>(data_) + offset; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_GROWN_BUFFERS_H_
