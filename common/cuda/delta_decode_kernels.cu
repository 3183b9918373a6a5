#include <cub/cub.cuh>

#include "common/cuda/delta_decode_kernels.h"

namespace wsync::cuda::delta {
namespace {

using BlockScanU64 = cub::BlockScan<unsigned long long, kDecodeThreads>;

__device__ __forceinline__ uint64_t Little(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Block b's plan: the last whose first block is at most b.
__device__ __forceinline__ uint32_t FindPlan(const SparsePlan* plans, uint32_t count, uint32_t b) {
  uint32_t lo = 0, hi = count;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (plans[mid].first_block <= b) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The first error of a plan wins; its numbers are written only by the thread that set it.
__device__ __forceinline__ void Report(PlanError* e, uint32_t kind, uint64_t a, uint64_t b) {
  if (atomicCAS(&e->kind, 0u, kind) == 0u) {
    e->a = a;
    e->b = b;
  }
}

// The block's sum of each thread's `mine`, by warp shuffles and shared memory.
__device__ __forceinline__ unsigned long long BlockSum(unsigned long long mine) {
  __shared__ unsigned long long warps[kDecodeThreads / 32];
#pragma unroll
  for (int step = 16; step > 0; step /= 2) mine += __shfl_down_sync(0xFFFFFFFFu, mine, step);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = mine;
  __syncthreads();
  unsigned long long total = 0;
  if (threadIdx.x == 0) {
    for (unsigned w = 0; w < kDecodeThreads / 32; ++w) total += warps[w];
  }
  return total;  // thread 0's
}

// The thread's bytes of its plan's region: [first, first + n) from the region's start.
struct ThreadBytes {
  uint32_t plan;
  uint64_t first;
  uint32_t n;
  __device__ ThreadBytes(const SparsePlan* plans, uint32_t n_plans) {
    plan = FindPlan(plans, n_plans, blockIdx.x);
    const SparsePlan& p = plans[plan];
    first = (blockIdx.x - p.first_block) * kDecodeBlockBytes + threadIdx.x * kDecodeThreadBytes;
    n = first >= p.region_bytes
            ? 0
            : static_cast<uint32_t>(min(static_cast<unsigned long long>(kDecodeThreadBytes),
                                        static_cast<unsigned long long>(p.region_bytes - first)));
  }
};

__global__ void WalkKernel(const unsigned char* f, uint64_t bytes, uint32_t count,
                           HeaderEntry* entries, WalkStatus* status) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  WalkStatus s;
  if (bytes < 4 || f[0] != 'W' || f[1] != 'S' || f[2] != 'D' || f[3] != '1') {
    s.kind = kWalkMagic;
    *status = s;
    return;
  }
  const uint64_t named = bytes < 8 ? 0 : Little(f + 4, 4);
  if (named != count) {
    s.kind = kWalkCount;
    s.a = named;
    *status = s;
    return;
  }
  uint64_t at = 8;
  for (uint32_t i = 0; i < count; ++i) {
    if (bytes - at < 17) {
      s.kind = kWalkHeaderCut;
      s.tensor = i;
      *status = s;
      return;
    }
    HeaderEntry e;
    e.form = f[at];
    e.k = Little(f + at + 1, 8);
    e.size = Little(f + at + 9, 8);
    e.payload = at + 17;
    entries[i] = e;  // read back for the count check even when its payload is cut
    if (e.size > bytes - e.payload) {
      s.kind = kWalkPayloadCut;
      s.tensor = i;
      s.a = e.size;
      s.b = bytes - e.payload;
      *status = s;
      return;
    }
    at = e.payload + e.size;
  }
  if (at != bytes) {
    s.kind = kWalkTrailing;
    s.a = bytes - at;
  }
  *status = s;
}

__global__ void __launch_bounds__(kDecodeThreads)
    BitmapCountKernel(const unsigned char* frame, const SparsePlan* plans, uint32_t n_plans,
                      unsigned long long* block_count, unsigned long long* plan_count,
                      PlanError* errors) {
  const ThreadBytes t(plans, n_plans);
  const SparsePlan p = plans[t.plan];
  unsigned long long bits = 0;
  for (uint32_t i = 0; i < t.n; ++i) {
    const uint64_t byte = t.first + i;
    uint32_t v = frame[p.region + byte];
    if (byte == p.region_bytes - 1 && p.elements % 8 != 0) {
      const uint32_t past = v >> (p.elements % 8);
      if (past != 0) {
        Report(&errors[t.plan], kErrorBitPastEnd, byte * 8 + p.elements % 8 + __ffs(past) - 1,
               p.elements);
      }
      v &= (1u << (p.elements % 8)) - 1;
    }
    bits += __popc(v);
  }
  const unsigned long long total = BlockSum(bits);
  if (threadIdx.x == 0) {
    block_count[blockIdx.x] = total;
    if (total != 0) atomicAdd(&plan_count[t.plan], total);
  }
}

__global__ void __launch_bounds__(kDecodeThreads)
    BitmapScatterKernel(const unsigned char* frame, const SparsePlan* plans, uint32_t n_plans,
                        const unsigned long long* block_rank, unsigned char* out) {
  const ThreadBytes t(plans, n_plans);
  const SparsePlan p = plans[t.plan];
  unsigned long long bits = 0;
  for (uint32_t i = 0; i < t.n; ++i) bits += __popc(frame[p.region + t.first + i]);
  __shared__ typename BlockScanU64::TempStorage temp;
  unsigned long long rank;
  BlockScanU64(temp).ExclusiveSum(bits, rank);
  rank += block_rank[blockIdx.x] - block_rank[p.first_block];
  for (uint32_t i = 0; i < t.n; ++i) {
    for (uint32_t v = frame[p.region + t.first + i]; v != 0; v &= v - 1) {
      const uint64_t element = (t.first + i) * 8 + __ffs(v) - 1;
      if (element < p.elements && rank < p.k) {
        const unsigned char* from = frame + p.values + rank * p.width;
        unsigned char* to = out + p.out + element * p.width;
        for (uint32_t b = 0; b < p.width; ++b) to[b] = from[b];
      }
      ++rank;
    }
  }
}

__global__ void __launch_bounds__(kDecodeThreads)
    VarintCountKernel(const unsigned char* frame, const SparsePlan* plans, uint32_t n_plans,
                      unsigned long long* block_count, unsigned long long* plan_count,
                      PlanError* errors) {
  const ThreadBytes t(plans, n_plans);
  const SparsePlan p = plans[t.plan];
  unsigned long long ends = 0;
  for (uint32_t i = 0; i < t.n; ++i) ends += (frame[p.region + t.first + i] & 0x80) == 0;
  if (t.n > 0 && t.first + t.n == p.region_bytes &&
      (frame[p.region + p.region_bytes - 1] & 0x80) != 0) {
    Report(&errors[t.plan], kErrorLastVarintCut, 0, 0);
  }
  const unsigned long long total = BlockSum(ends);
  if (threadIdx.x == 0) {
    block_count[blockIdx.x] = total;
    if (total != 0) atomicAdd(&plan_count[t.plan], total);
  }
}

__global__ void __launch_bounds__(kDecodeThreads)
    VarintDecodeKernel(const unsigned char* frame, const SparsePlan* plans, uint32_t n_plans,
                       const unsigned long long* block_rank, unsigned long long* steps,
                       uint32_t* keys, PlanError* errors) {
  const ThreadBytes t(plans, n_plans);
  const SparsePlan p = plans[t.plan];
  const unsigned char* region = frame + p.region;
  unsigned long long ends = 0;
  for (uint32_t i = 0; i < t.n; ++i) ends += (region[t.first + i] & 0x80) == 0;
  __shared__ typename BlockScanU64::TempStorage temp;
  unsigned long long index;
  BlockScanU64(temp).ExclusiveSum(ends, index);
  index += block_rank[blockIdx.x] - block_rank[p.first_block];
  for (uint32_t i = 0; i < t.n; ++i) {
    const uint64_t end = t.first + i;
    if ((region[end] & 0x80) != 0) continue;
    uint64_t start = end;
    while (start > 0 && (region[start - 1] & 0x80) != 0 && end - start < 10) --start;
    const uint64_t j = index++;
    if (j >= p.k) continue;  // more positions than k: refused before this kernel runs
    const uint64_t length = end - start + 1;
    if (length > 10 || (length == 10 && region[end] > 1)) {
      Report(&errors[t.plan], kErrorVarintTooLong, j, 0);
      steps[p.gap_base + j] = 1;
      keys[p.gap_base + j] = t.plan;
      continue;
    }
    uint64_t gap = 0;
    for (uint64_t b = 0; b < length; ++b) {
      gap |= static_cast<uint64_t>(region[start + b] & 0x7F) << (7 * b);
    }
    if (gap >= p.elements) {
      Report(&errors[t.plan], kErrorPositionPastEnd, j, p.elements - 1);
      gap = 0;
    }
    steps[p.gap_base + j] = gap + 1;
    keys[p.gap_base + j] = t.plan;
  }
}

__global__ void GapScatterKernel(const unsigned char* frame, const SparsePlan* plans,
                                 const uint32_t* keys, const unsigned long long* positions,
                                 size_t n_entries, unsigned char* out, PlanError* errors) {
  const uint64_t j = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (j >= n_entries) return;
  const uint32_t plan = keys[j];
  const SparsePlan& p = plans[plan];
  const uint64_t local = j - p.gap_base;
  const uint64_t position = positions[j] - 1;
  if (position >= p.elements) {
    Report(&errors[plan], kErrorPositionPastEnd, local, p.elements - 1);
    return;
  }
  const unsigned char* from = frame + p.values + local * p.width;
  unsigned char* to = out + p.out + position * p.width;
  for (uint32_t b = 0; b < p.width; ++b) to[b] = from[b];
}

struct SameKey {
  __device__ __forceinline__ bool operator()(uint32_t a, uint32_t b) const { return a == b; }
};

}  // namespace

cudaError_t LaunchWalk(const void* frame, uint64_t frame_bytes, uint32_t count,
                       HeaderEntry* entries, WalkStatus* status, cudaStream_t stream) {
  WalkKernel<<<1, 1, 0, stream>>>(static_cast<const unsigned char*>(frame), frame_bytes, count,
                                  entries, status);
  return cudaGetLastError();
}

cudaError_t LaunchBitmapCount(const void* frame, const SparsePlan* plans, uint32_t n_plans,
                              size_t n_blocks, unsigned long long* block_count,
                              unsigned long long* plan_count, PlanError* errors,
                              cudaStream_t stream) {
  BitmapCountKernel<<<static_cast<unsigned>(n_blocks), kDecodeThreads, 0, stream>>>(
      static_cast<const unsigned char*>(frame), plans, n_plans, block_count, plan_count, errors);
  return cudaGetLastError();
}

cudaError_t LaunchBitmapScatter(const void* frame, const SparsePlan* plans, uint32_t n_plans,
                                size_t n_blocks, const unsigned long long* block_rank, void* out,
                                cudaStream_t stream) {
  BitmapScatterKernel<<<static_cast<unsigned>(n_blocks), kDecodeThreads, 0, stream>>>(
      static_cast<const unsigned char*>(frame), plans, n_plans, block_rank,
      static_cast<unsigned char*>(out));
  return cudaGetLastError();
}

cudaError_t LaunchVarintCount(const void* frame, const SparsePlan* plans, uint32_t n_plans,
                              size_t n_blocks, unsigned long long* block_count,
                              unsigned long long* plan_count, PlanError* errors,
                              cudaStream_t stream) {
  VarintCountKernel<<<static_cast<unsigned>(n_blocks), kDecodeThreads, 0, stream>>>(
      static_cast<const unsigned char*>(frame), plans, n_plans, block_count, plan_count, errors);
  return cudaGetLastError();
}

cudaError_t LaunchVarintDecode(const void* frame, const SparsePlan* plans, uint32_t n_plans,
                               size_t n_blocks, const unsigned long long* block_rank,
                               unsigned long long* steps, uint32_t* keys, PlanError* errors,
                               cudaStream_t stream) {
  VarintDecodeKernel<<<static_cast<unsigned>(n_blocks), kDecodeThreads, 0, stream>>>(
      static_cast<const unsigned char*>(frame), plans, n_plans, block_rank, steps, keys, errors);
  return cudaGetLastError();
}

cudaError_t ScanSteps(void* temp, size_t* temp_bytes, const uint32_t* keys,
                      const unsigned long long* steps, unsigned long long* positions,
                      size_t n_entries, cudaStream_t stream) {
  return cub::DeviceScan::InclusiveSumByKey(temp, *temp_bytes, keys, steps, positions,
                                            static_cast<int64_t>(n_entries), SameKey(), stream);
}

cudaError_t LaunchGapScatter(const void* frame, const SparsePlan* plans, const uint32_t* keys,
                             const unsigned long long* positions, size_t n_entries, void* out,
                             PlanError* errors, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((n_entries + kDecodeThreads - 1) / kDecodeThreads);
  GapScatterKernel<<<blocks, kDecodeThreads, 0, stream>>>(static_cast<const unsigned char*>(frame),
                                                          plans, keys, positions, n_entries,
                                                          static_cast<unsigned char*>(out), errors);
  return cudaGetLastError();
}

}  // namespace wsync::cuda::delta
