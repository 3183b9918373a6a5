#ifndef WSYNC_COMMON_CUDA_KERNELS_H_
#define WSYNC_COMMON_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace wsync::cuda {

// One piece of a bucket: `bytes` from `src` (device, peer-mapped or pinned memory) to `offset`
// bytes into the destination buffer.
struct CopyItem {
  const void* src;
  uint64_t offset;
  uint64_t bytes;
};

// The bucket kernels' work list and per-block results, pinned on the host and mirrored on the
// device, grown as needed and reused from bucket to bucket. One user (stream) at a time.
class KernelScratch {
 public:
  static absl::StatusOr<std::unique_ptr<KernelScratch>> Create(int device);
  ~KernelScratch();
  KernelScratch(const KernelScratch&) = delete;
  KernelScratch& operator=(const KernelScratch&) = delete;

 private:
  friend class BucketKernels;
  explicit KernelScratch(int device, cudaEvent_t last_use) : device_(device), last_use_(last_use) {}
  absl::Status Reserve(size_t item_bytes, size_t result_count);
  int device_;
  cudaEvent_t last_use_;  // the last kernel that read the device work list
  void* host_items_ = nullptr;
  void* device_items_ = nullptr;
  size_t item_capacity_ = 0;
  uint32_t* host_results_ = nullptr;  // pinned; the kernel writes them directly
  size_t result_capacity_ = 0;
};

// CRC-32 chunk sizes the checksum kernels support: each thread checksums one chunk, a block of
// 256 threads merges its chunks, the host merges the blocks. Smaller chunks give more threads
// for a small bucket; larger ones fewer blocks to merge.
inline constexpr uint32_t kCrcChunkSizes[] = {512, 1024, 2048, 4096};
inline constexpr uint32_t kDefaultCrcChunk = 1024;

// Copies every item into `dst` in one kernel launch on `stream`, so a bucket of thousands of
// tensors costs one launch. Items must not overlap in `dst`. Does not wait for the copy.
absl::Status BatchedCopy(const std::vector<CopyItem>& items, void* dst, cudaStream_t stream,
                         KernelScratch* scratch);

// BatchedCopy, then the CRC-32 of dst[0, span) in the same launch: each block checksums the range
// it has just written, reading it back from L2, so the bucket's bytes cross HBM once. Equal to
// wsync::Crc32 of those bytes. Synchronises `stream`.
absl::StatusOr<uint32_t> CopyAndCrc32(const std::vector<CopyItem>& items, void* dst, uint64_t span,
                                      cudaStream_t stream, KernelScratch* scratch);

// CRC-32 (zlib's) of device memory, equal to wsync::Crc32 of the same bytes. Synchronises
// `stream`. chunk_bytes: one of kCrcChunkSizes.
absl::StatusOr<uint32_t> DeviceCrc32(const void* data, uint64_t bytes, cudaStream_t stream,
                                     KernelScratch* scratch,
                                     uint32_t chunk_bytes = kDefaultCrcChunk);

}  // namespace wsync::cuda

#endif  // WSYNC_COMMON_CUDA_KERNELS_H_
