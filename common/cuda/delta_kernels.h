#ifndef WSYNC_COMMON_CUDA_DELTA_KERNELS_H_
#define WSYNC_COMMON_CUDA_DELTA_KERNELS_H_

// The GPU delta encoder's kernels (DeltaEncoder, delta_encoder.h, plans and drives them): plain
// structs and launches, so that the CUDA compiler sees nothing of the C++20 the rest is in.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace wsync::cuda::delta {

// A block of 256 threads takes one chunk of one tensor, 64 KiB: each thread four 64-byte groups
// in a row, each group a 64-bit mask (64 / width elements, at least 8 bits: whole bytes of a
// bitmap), kept in element order.
inline constexpr unsigned kThreads = 256;
inline constexpr uint64_t kGroupBytes = 64;
inline constexpr unsigned kGroupsPerThread = 4;
inline constexpr unsigned kGroupsPerChunk = kThreads * kGroupsPerThread;
inline constexpr uint64_t kChunkBytes = kGroupsPerChunk * kGroupBytes;
inline constexpr int kHeaderBytes = 17;  // u8 form, u64 changed elements, u64 payload bytes
inline constexpr int kPrefixBytes = 8;   // "WSD1", u32 tensor count
// DeltaForm's values.
inline constexpr uint32_t kFormDense = 0, kFormBitmap = 1, kFormGaps = 2;

// One tensor of the bucket as the kernels see it.
struct TensorPlan {
  uint64_t offset = 0;   // in the bucket
  uint64_t length = 0;   // bytes
  uint64_t payload = 0;  // frame offset of the payload (its header just before)
  uint64_t values = 0;   // frame offset of the new values (bitmap and gaps)
  uint64_t bitmap_bytes = 0;
  uint32_t width = 1;
  uint32_t first_chunk = 0;
  uint32_t form = 0;
  uint32_t gap_candidate = 0;  // the positions may be the smallest form: size them
};

// Bytes [start, start + kChunkBytes) of one tensor: one block's (found from the tensors' first
// chunks).
struct Chunk {
  uint32_t tensor;
  uint32_t unused;
  uint64_t start;  // byte in the tensor
};

// Pass 1: each element compared at its width, its bit kept in `masks` (kGroupsPerChunk per chunk);
// per chunk the count and the last changed position as (tensor + 1) << 40 | (position + 1), per
// tensor the count (added to `tensor_k`, zeroed before).
cudaError_t LaunchCompare(const void* base, const void* next, const TensorPlan* tensors,
                          uint32_t tensor_count, size_t n_chunks, uint64_t* masks,
                          unsigned long long* chunk_count, unsigned long long* chunk_last,
                          unsigned long long* tensor_k, cudaStream_t stream);
// The exclusive max-scan of the chunks' last positions: each chunk's previous change.
cudaError_t ScanPrevious(void* temp, size_t* temp_bytes, const unsigned long long* chunk_last,
                         unsigned long long* chunk_prev, size_t n_chunks, cudaStream_t stream);
// An exclusive sum over the chunks.
cudaError_t ScanSum(void* temp, size_t* temp_bytes, const unsigned long long* in,
                    unsigned long long* out, size_t n_chunks, cudaStream_t stream);
// Pass 2, for the tensors marked gap_candidate: their varints' bytes per chunk and per tensor
// (added to `tensor_bytes`, zeroed before; 0 for the other chunks).
cudaError_t LaunchPositionBytes(const TensorPlan* tensors, uint32_t tensor_count, size_t n_chunks,
                                const uint64_t* masks, const unsigned long long* chunk_prev,
                                unsigned long long* chunk_bytes, unsigned long long* tensor_bytes,
                                cudaStream_t stream);
// Pass 3: every payload, at the tensors' planned forms and offsets; `chunk_rank` and
// `chunk_offset` are the exclusive sums of the chunks' counts and varint bytes.
cudaError_t LaunchWrite(const void* next, const TensorPlan* tensors, uint32_t tensor_count,
                        size_t n_chunks, const uint64_t* masks,
                        const unsigned long long* chunk_prev, const unsigned long long* chunk_rank,
                        const unsigned long long* chunk_offset, void* frame, cudaStream_t stream);
// The frame's prefix and each tensor's header from `blob` (prefix, then a header per tensor),
// each header just before its payload.
cudaError_t LaunchHeaders(const void* blob, const TensorPlan* tensors, uint32_t count, void* frame,
                          cudaStream_t stream);

}  // namespace wsync::cuda::delta

#endif  // WSYNC_COMMON_CUDA_DELTA_KERNELS_H_
