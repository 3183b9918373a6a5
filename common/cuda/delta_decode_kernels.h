#ifndef WSYNC_COMMON_CUDA_DELTA_DECODE_KERNELS_H_
#define WSYNC_COMMON_CUDA_DELTA_DECODE_KERNELS_H_

// The GPU delta decoder's kernels (DeltaDecoder, delta_decoder.h, plans and drives them): plain
// structs and launches, so that the CUDA compiler sees nothing of the C++20 the rest is in.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace wsync::cuda::delta {

// A block of 256 threads takes 4 KiB of one tensor's bitmap or positions, 16 bytes a thread.
inline constexpr unsigned kDecodeThreads = 256;
inline constexpr uint64_t kDecodeThreadBytes = 16;
inline constexpr uint64_t kDecodeBlockBytes = kDecodeThreads * kDecodeThreadBytes;

// One tensor's header as the walk read it.
struct HeaderEntry {
  uint64_t k = 0;
  uint64_t size = 0;
  uint64_t payload = 0;  // frame offset
  uint32_t form = 0;
  uint32_t unused = 0;
};

// The walk's verdict: kind 0 when every header and payload lies inside the frame; else what was
// wrong at `tensor` (or, for the prefix and the end, of the frame).
struct WalkStatus {
  uint32_t kind = 0;
  uint32_t tensor = 0;
  uint64_t a = 0, b = 0;
};
inline constexpr uint32_t kWalkOk = 0, kWalkMagic = 1, kWalkCount = 2, kWalkHeaderCut = 3,
                          kWalkPayloadCut = 4, kWalkTrailing = 5;

// A bitmap or gaps tensor: where its parts lie, and its blocks.
struct SparsePlan {
  uint64_t out = 0;           // the tensor's offset in the bucket
  uint64_t elements = 0;      // n
  uint64_t k = 0;             // changed elements the header says
  uint64_t region = 0;        // frame offset of the bitmap or the positions
  uint64_t region_bytes = 0;  // their bytes
  uint64_t values = 0;        // frame offset of the values
  uint64_t gap_base = 0;      // gaps only: its first entry in the gap arrays
  uint32_t width = 1;
  uint32_t first_block = 0;
};

// Per plan, the first error the kernels found (kind 0: none) and its numbers.
struct PlanError {
  uint32_t kind = 0;
  uint32_t unused = 0;
  uint64_t a = 0, b = 0;
};
inline constexpr uint32_t kErrorBitPastEnd = 1,  // a: the element, b: n
    kErrorVarintTooLong = 2,                     // a: the position's index
    kErrorPositionPastEnd = 3,                   // a: the position's index, b: n - 1
    kErrorLastVarintCut = 4;                     // the positions end inside a varint

// Reads the prefix and every header of the frame (one thread: each header's place depends on the
// payloads before it); `count` tensors expected.
cudaError_t LaunchWalk(const void* frame, uint64_t frame_bytes, uint32_t count,
                       HeaderEntry* entries, WalkStatus* status, cudaStream_t stream);
// Bitmaps: each block's set bits (`block_count`), each plan's (added to `plan_count`, zeroed
// before), and a bit set past the tensor's end.
cudaError_t LaunchBitmapCount(const void* frame, const SparsePlan* plans, uint32_t n_plans,
                              size_t n_blocks, unsigned long long* block_count,
                              unsigned long long* plan_count, PlanError* errors,
                              cudaStream_t stream);
// Bitmaps: each set bit's value into `out` at its element (`block_rank`: the exclusive sum of
// block_count). Values past the plan's k are not read.
cudaError_t LaunchBitmapScatter(const void* frame, const SparsePlan* plans, uint32_t n_plans,
                                size_t n_blocks, const unsigned long long* block_rank, void* out,
                                cudaStream_t stream);
// Positions: each block's varint ends (bytes without the high bit), each plan's, and positions
// that end inside a varint.
cudaError_t LaunchVarintCount(const void* frame, const SparsePlan* plans, uint32_t n_plans,
                              size_t n_blocks, unsigned long long* block_count,
                              unsigned long long* plan_count, PlanError* errors,
                              cudaStream_t stream);
// Positions: each varint decoded (gap + 1 into `steps`, its plan into `keys`, at the plan's
// gap_base + its index); one longer than 10 bytes or past 64 bits is an error.
cudaError_t LaunchVarintDecode(const void* frame, const SparsePlan* plans, uint32_t n_plans,
                               size_t n_blocks, const unsigned long long* block_rank,
                               unsigned long long* steps, uint32_t* keys, PlanError* errors,
                               cudaStream_t stream);
// The positions: per plan, the inclusive sum of its steps (each position + 1).
cudaError_t ScanSteps(void* temp, size_t* temp_bytes, const uint32_t* keys,
                      const unsigned long long* steps, unsigned long long* positions,
                      size_t n_entries, cudaStream_t stream);
// Positions: each value into `out` at its position; a position past the tensor is an error.
cudaError_t LaunchGapScatter(const void* frame, const SparsePlan* plans, const uint32_t* keys,
                             const unsigned long long* positions, size_t n_entries, void* out,
                             PlanError* errors, cudaStream_t stream);

}  // namespace wsync::cuda::delta

#endif  // WSYNC_COMMON_CUDA_DELTA_DECODE_KERNELS_H_
