#include <cub/cub.cuh>

#include "common/cuda/delta_kernels.h"

namespace wsync::cuda::delta {
namespace {

constexpr uint64_t kPositionBits = 40;
constexpr uint64_t kPositionMask = (1ull << kPositionBits) - 1;

__device__ __forceinline__ uint64_t Min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(const T& a, const T& b) const {
    return a > b ? a : b;
  }
};

using Mask = uint64_t;
using BlockSum64 = cub::BlockReduce<unsigned long long, kThreads>;
using BlockScan64 = cub::BlockScan<long long, kThreads>;
using BlockScanU64 = cub::BlockScan<unsigned long long, kThreads>;

// Block b's chunk: the last tensor whose first chunk is at most b (an empty tensor shares its
// first chunk with the next one, which is the one found), and where in it.
__device__ __forceinline__ Chunk FindChunk(const TensorPlan* tensors, uint32_t count, uint32_t b) {
  uint32_t lo = 0, hi = count;  // tensors[lo].first_chunk <= b < tensors[hi].first_chunk
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (tensors[mid].first_chunk <= b) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return Chunk{lo, 0, (b - tensors[lo].first_chunk) * kChunkBytes};
}

__device__ __forceinline__ int LastBit(Mask m) { return 63 - __clzll(static_cast<long long>(m)); }
__device__ __forceinline__ int FirstBit(Mask m) { return __ffsll(static_cast<long long>(m)) - 1; }

__device__ __forceinline__ uint32_t VarintSize(uint64_t v) {
  uint32_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// The last changed position of the tensor before this chunk (-1: none), from the exclusive
// max-scan of the chunks' (tensor + 1, position + 1) keys.
__device__ __forceinline__ long long PreviousInTensor(unsigned long long key, uint32_t tensor) {
  if ((key >> kPositionBits) != tensor + 1ull) return -1;
  return static_cast<long long>(key & kPositionMask) - 1;
}

// Bit e set where element e of one 16-byte unit differs (16 / width bits).
__device__ __forceinline__ uint32_t UnitDiffBits(uint4 a, uint4 b, uint32_t width) {
  const uint32_t x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
  uint32_t m = 0;
  switch (width) {
    case 1:
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        // 0xFF per differing byte; its low bits gathered into bits 28..31.
        const uint32_t r = __vcmpne4(x[j], y[j]) & 0x01010101u;
        m |= ((r * 0x10204080u) >> 28) << (4 * j);
      }
      break;
    case 2:
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t r = __vcmpne2(x[j], y[j]);
        m |= ((r & 1u) | ((r >> 15) & 2u)) << (2 * j);
      }
      break;
    case 4:
#pragma unroll
      for (int j = 0; j < 4; ++j) m |= static_cast<uint32_t>(x[j] != y[j]) << j;
      break;
    default:
      m = static_cast<uint32_t>(x[0] != y[0] || x[1] != y[1]) |
          (static_cast<uint32_t>(x[2] != y[2] || x[3] != y[3]) << 1);
  }
  return m;
}

// One 16-byte unit of a tensor (bytes past the tensor's end read as 0 in both). Every index is
// a constant once unrolled, so the words stay in registers (an array indexed at run time would
// live in local memory, and its traffic would double what the kernel moves).
__device__ __forceinline__ uint4 LoadUnit(const unsigned char* p, uint64_t bytes, bool aligned) {
  if (bytes >= 16 && aligned) return __ldg(reinterpret_cast<const uint4*>(p));
  uint32_t x[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t byte = static_cast<uint64_t>(i) < bytes ? p[i] : 0u;
    x[i / 4] |= byte << (8 * (i % 4));
  }
  return make_uint4(x[0], x[1], x[2], x[3]);
}

// Pass 1: each element compared; its bit kept; per chunk the count and the last changed position,
// per tensor the count. The chunk is read in rounds of 256 consecutive 16-byte units (every warp
// load one contiguous 512 bytes), four rounds' loads in flight at once; the 4 lanes holding a
// group's units put its mask together by shuffles. Warps reduce by shuffles, the block through
// shared memory once.
__global__ void __launch_bounds__(kThreads)
    CompareKernel(const unsigned char* base, const unsigned char* next, const TensorPlan* tensors,
                  uint32_t tensor_count, Mask* masks, unsigned long long* chunk_count,
                  unsigned long long* chunk_last, unsigned long long* tensor_k) {
  constexpr int kRounds = kChunkBytes / (16 * kThreads);
  constexpr int kBatch = 4;
  const Chunk ch = FindChunk(tensors, tensor_count, blockIdx.x);
  const TensorPlan t = tensors[ch.tensor];
  const unsigned char* a = base + t.offset + ch.start;
  const unsigned char* b = next + t.offset + ch.start;
  const bool aligned =
      ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15) == 0;
  const uint64_t left = t.length - ch.start;  // bytes of the tensor from the chunk's start
  const uint32_t unit_bits = 16 / t.width;
  const uint32_t lane = threadIdx.x % 32;
  Mask* chunk_masks = masks + static_cast<uint64_t>(blockIdx.x) * kGroupsPerChunk;
  unsigned long long count = 0, last = 0;
#pragma unroll
  for (int r0 = 0; r0 < kRounds; r0 += kBatch) {
    uint4 va[kBatch], vb[kBatch];
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      const uint64_t at = 16 * (static_cast<uint64_t>(r0 + r) * kThreads + threadIdx.x);
      va[r] = vb[r] = make_uint4(0, 0, 0, 0);
      if (at < left) {
        va[r] = LoadUnit(a + at, left - at, aligned);
        vb[r] = LoadUnit(b + at, left - at, aligned);
      }
    }
#pragma unroll
    for (int r = 0; r < kBatch; ++r) {
      const uint32_t bits = UnitDiffBits(va[r], vb[r], t.width);
      // Lanes 4k .. 4k+3 hold one group's units, in order.
      Mask m = bits;
#pragma unroll
      for (int j = 1; j < 4; ++j) {
        const uint32_t other = __shfl_down_sync(0xFFFFFFFFu, bits, j);
        m |= static_cast<Mask>(other) << (j * unit_bits);
      }
      if (lane % 4 == 0) {
        const uint32_t group = (r0 + r) * (kThreads / 4) + threadIdx.x / 4;
        chunk_masks[group] = m;
        count += __popcll(m);
        if (m != 0) {
          const uint64_t elem0 = (ch.start + group * kGroupBytes) / t.width;
          last = ((ch.tensor + 1ull) << kPositionBits) | (elem0 + LastBit(m) + 1);
        }
      }
    }
  }
#pragma unroll
  for (int step = 16; step > 0; step /= 2) {
    count += __shfl_down_sync(0xFFFFFFFFu, count, step);
    const unsigned long long other = __shfl_down_sync(0xFFFFFFFFu, last, step);
    last = other > last ? other : last;
  }
  __shared__ unsigned long long warp_count[kThreads / 32], warp_last[kThreads / 32];
  if (lane == 0) {
    warp_count[threadIdx.x / 32] = count;
    warp_last[threadIdx.x / 32] = last;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned w = 1; w < kThreads / 32; ++w) {
      count += warp_count[w];
      last = warp_last[w] > last ? warp_last[w] : last;
    }
    chunk_count[blockIdx.x] = count;
    chunk_last[blockIdx.x] = last;
    if (count != 0) atomicAdd(&tensor_k[ch.tensor], count);
  }
}

// A thread's groups: their masks and first elements, in element order.
struct ThreadGroups {
  Mask mask[kGroupsPerThread];
  uint64_t elem0[kGroupsPerThread];
  __device__ void Load(const Mask* masks, const Chunk& ch, uint32_t width) {
    const Mask* mine = masks + static_cast<uint64_t>(blockIdx.x) * kGroupsPerChunk +
                       threadIdx.x * kGroupsPerThread;
#pragma unroll
    for (unsigned j = 0; j < kGroupsPerThread; ++j) {
      mask[j] = mine[j];
      elem0[j] = (ch.start + (threadIdx.x * kGroupsPerThread + j) * kGroupBytes) / width;
    }
  }
  __device__ unsigned long long Count() const {
    unsigned long long n = 0;
#pragma unroll
    for (unsigned j = 0; j < kGroupsPerThread; ++j) n += __popcll(mask[j]);
    return n;
  }
  // The last changed position (-1: none).
  __device__ long long Last() const {
    long long last = -1;
#pragma unroll
    for (unsigned j = 0; j < kGroupsPerThread; ++j) {
      if (mask[j] != 0) last = static_cast<long long>(elem0[j] + LastBit(mask[j]));
    }
    return last;
  }
  // Calls f(position) for each changed element, in order.
  template <typename F>
  __device__ void ForEach(F f) const {
#pragma unroll
    for (unsigned j = 0; j < kGroupsPerThread; ++j) {
      for (Mask m = mask[j]; m != 0; m &= m - 1) f(elem0[j] + FirstBit(m));
    }
  }
};

// The thread's previous changed position: the last of the threads before it in the chunk, else
// of the chunks before it in the tensor.
__device__ __forceinline__ long long PreviousPosition(long long mine, long long before_chunk,
                                                      typename BlockScan64::TempStorage& temp) {
  long long prev;
  BlockScan64(temp).ExclusiveScan(mine, prev, before_chunk, MaxOp());
  return prev;
}

// Pass 2, for tensors whose positions may be the smallest form: the bytes of their varints, per
// chunk and per tensor.
__global__ void __launch_bounds__(kThreads)
    PositionBytesKernel(const TensorPlan* tensors, uint32_t tensor_count, const Mask* masks,
                        const unsigned long long* chunk_prev, unsigned long long* chunk_bytes,
                        unsigned long long* tensor_bytes) {
  const Chunk ch = FindChunk(tensors, tensor_count, blockIdx.x);
  const TensorPlan t = tensors[ch.tensor];
  if (!t.gap_candidate) {
    if (threadIdx.x == 0) chunk_bytes[blockIdx.x] = 0;
    return;
  }
  ThreadGroups g;
  g.Load(masks, ch, t.width);
  __shared__ union {
    typename BlockScan64::TempStorage scan;
    typename BlockSum64::TempStorage sum;
  } temp;
  long long prev =
      PreviousPosition(g.Last(), PreviousInTensor(chunk_prev[blockIdx.x], ch.tensor), temp.scan);
  unsigned long long bytes = 0;
  g.ForEach([&](uint64_t position) {
    const auto pos = static_cast<long long>(position);
    bytes += VarintSize(static_cast<uint64_t>(prev < 0 ? pos : pos - prev - 1));
    prev = pos;
  });
  __syncthreads();
  const unsigned long long total = BlockSum64(temp.sum).Sum(bytes);
  if (threadIdx.x == 0) {
    chunk_bytes[blockIdx.x] = total;
    if (total != 0) atomicAdd(&tensor_bytes[ch.tensor], total);
  }
}

// Pass 3: the payloads. Dense: the bytes. Bitmap: the mask's bytes, then each changed element's
// value at its rank. Gaps: the varints at their offsets, then the values.
__global__ void __launch_bounds__(kThreads)
    WriteKernel(const unsigned char* next, const TensorPlan* tensors, uint32_t tensor_count,
                const Mask* masks, const unsigned long long* chunk_prev,
                const unsigned long long* chunk_rank, const unsigned long long* chunk_offset,
                unsigned char* frame) {
  const Chunk ch = FindChunk(tensors, tensor_count, blockIdx.x);
  const TensorPlan t = tensors[ch.tensor];
  if (t.form == kFormDense) {
    // The chunk's bytes, the block's threads on consecutive bytes (the payload has no alignment).
    const uint64_t n = Min64(kChunkBytes, t.length - ch.start);
    const unsigned char* src = next + t.offset + ch.start;
    unsigned char* dst = frame + t.payload + ch.start;
    for (uint64_t i = threadIdx.x; i < n; i += kThreads) dst[i] = src[i];
    return;
  }
  ThreadGroups g;
  g.Load(masks, ch, t.width);
  __shared__ union {
    typename BlockScanU64::TempStorage scan;
    typename BlockScan64::TempStorage prev;
  } temp;
  unsigned long long rank;
  BlockScanU64(temp.scan).ExclusiveSum(g.Count(), rank);
  rank += chunk_rank[blockIdx.x] - chunk_rank[t.first_chunk];
  if (t.form == kFormBitmap) {
    // 64 / width bits a group: whole bytes of the bitmap, none past its end.
    const uint32_t bytes = kGroupBytes / t.width / 8;
#pragma unroll
    for (unsigned j = 0; j < kGroupsPerThread; ++j) {
      for (uint32_t i = 0; i < bytes && g.elem0[j] / 8 + i < t.bitmap_bytes; ++i) {
        frame[t.payload + g.elem0[j] / 8 + i] = static_cast<unsigned char>(g.mask[j] >> (8 * i));
      }
    }
  } else {
    __syncthreads();
    const long long first_prev =
        PreviousPosition(g.Last(), PreviousInTensor(chunk_prev[blockIdx.x], ch.tensor), temp.prev);
    long long prev = first_prev;
    unsigned long long bytes = 0;
    g.ForEach([&](uint64_t position) {
      const auto pos = static_cast<long long>(position);
      bytes += VarintSize(static_cast<uint64_t>(prev < 0 ? pos : pos - prev - 1));
      prev = pos;
    });
    __syncthreads();
    unsigned long long at;
    BlockScanU64(temp.scan).ExclusiveSum(bytes, at);
    unsigned char* out =
        frame + t.payload + (chunk_offset[blockIdx.x] - chunk_offset[t.first_chunk]) + at;
    prev = first_prev;
    g.ForEach([&](uint64_t position) {
      const auto pos = static_cast<long long>(position);
      uint64_t v = static_cast<uint64_t>(prev < 0 ? pos : pos - prev - 1);
      prev = pos;
      while (v >= 0x80) {
        *out++ = static_cast<unsigned char>((v & 0x7F) | 0x80);
        v >>= 7;
      }
      *out++ = static_cast<unsigned char>(v);
    });
  }
  const unsigned char* src = next + t.offset;
  g.ForEach([&](uint64_t pos) {
    const unsigned char* from = src + pos * t.width;
    unsigned char* to = frame + t.values + rank * t.width;
    for (uint32_t i = 0; i < t.width; ++i) to[i] = from[i];
    ++rank;
  });
}

// The frame's prefix and each tensor's header, from the header blob the host wrote.
__global__ void HeaderKernel(const unsigned char* blob, const TensorPlan* tensors, uint32_t count,
                             unsigned char* frame) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) {
    for (int b = 0; b < kPrefixBytes; ++b) frame[b] = blob[b];
  }
  if (i >= count) return;
  const unsigned char* from = blob + kPrefixBytes + kHeaderBytes * static_cast<uint64_t>(i);
  unsigned char* to = frame + tensors[i].payload - kHeaderBytes;
  for (int b = 0; b < kHeaderBytes; ++b) to[b] = from[b];
}

}  // namespace

cudaError_t LaunchCompare(const void* base, const void* next, const TensorPlan* tensors,
                          uint32_t tensor_count, size_t n_chunks, uint64_t* masks,
                          unsigned long long* chunk_count, unsigned long long* chunk_last,
                          unsigned long long* tensor_k, cudaStream_t stream) {
  CompareKernel<<<static_cast<unsigned>(n_chunks), kThreads, 0, stream>>>(
      static_cast<const unsigned char*>(base), static_cast<const unsigned char*>(next), tensors,
      tensor_count, masks, chunk_count, chunk_last, tensor_k);
  return cudaGetLastError();
}

cudaError_t ScanPrevious(void* temp, size_t* temp_bytes, const unsigned long long* chunk_last,
                         unsigned long long* chunk_prev, size_t n_chunks, cudaStream_t stream) {
  return cub::DeviceScan::ExclusiveScan(temp, *temp_bytes, chunk_last, chunk_prev, MaxOp(), 0ull,
                                        static_cast<int64_t>(n_chunks), stream);
}

cudaError_t ScanSum(void* temp, size_t* temp_bytes, const unsigned long long* in,
                    unsigned long long* out, size_t n_chunks, cudaStream_t stream) {
  return cub::DeviceScan::ExclusiveSum(temp, *temp_bytes, in, out, static_cast<int64_t>(n_chunks),
                                       stream);
}

cudaError_t LaunchPositionBytes(const TensorPlan* tensors, uint32_t tensor_count, size_t n_chunks,
                                const Mask* masks, const unsigned long long* chunk_prev,
                                unsigned long long* chunk_bytes, unsigned long long* tensor_bytes,
                                cudaStream_t stream) {
  PositionBytesKernel<<<static_cast<unsigned>(n_chunks), kThreads, 0, stream>>>(
      tensors, tensor_count, masks, chunk_prev, chunk_bytes, tensor_bytes);
  return cudaGetLastError();
}

cudaError_t LaunchWrite(const void* next, const TensorPlan* tensors, uint32_t tensor_count,
                        size_t n_chunks, const Mask* masks, const unsigned long long* chunk_prev,
                        const unsigned long long* chunk_rank,
                        const unsigned long long* chunk_offset, void* frame, cudaStream_t stream) {
  WriteKernel<<<static_cast<unsigned>(n_chunks), kThreads, 0, stream>>>(
      static_cast<const unsigned char*>(next), tensors, tensor_count, masks, chunk_prev, chunk_rank,
      chunk_offset, static_cast<unsigned char*>(frame));
  return cudaGetLastError();
}

cudaError_t LaunchHeaders(const void* blob, const TensorPlan* tensors, uint32_t count, void* frame,
                          cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((count + kThreads) / kThreads);
  HeaderKernel<<<blocks, kThreads, 0, stream>>>(static_cast<const unsigned char*>(blob), tensors,
                                                count, static_cast<unsigned char*>(frame));
  return cudaGetLastError();
}

}  // namespace wsync::cuda::delta
