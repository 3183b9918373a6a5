#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>

#include "common/checksum.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/kernels.h"

namespace wsync::cuda {
namespace {

constexpr uint64_t kCopyChunk = 1 << 20;
constexpr uint64_t kCrcChunk = 4096;

struct WorkItem {
  const unsigned char* src;
  unsigned char* dst;
  uint64_t bytes;
};

__global__ void CopyKernel(const WorkItem* items) {
  const WorkItem w = items[blockIdx.x];
  const bool aligned =
      ((reinterpret_cast<uintptr_t>(w.src) | reinterpret_cast<uintptr_t>(w.dst)) & 15) == 0;
  uint64_t done = 0;
  if (aligned) {
    const uint64_t n16 = w.bytes / 16;
    const uint4* s = reinterpret_cast<const uint4*>(w.src);
    uint4* d = reinterpret_cast<uint4*>(w.dst);
    for (uint64_t i = threadIdx.x; i < n16; i += blockDim.x) d[i] = s[i];
    done = n16 * 16;
  }
  for (uint64_t i = done + threadIdx.x; i < w.bytes; i += blockDim.x) w.dst[i] = w.src[i];
}

// Checksum: each thread takes a 4 KiB chunk (slicing-by-8 tables in shared memory), then each
// block merges its 256 chunk CRCs pairwise with "append n zero bytes" operators
// (Crc32Operator), so a block yields the CRC of its 1 MiB; the host merges the blocks.
constexpr unsigned kCrcThreads = 256;
constexpr int kCrcShiftLevels = 9;  // operators for 1, 2, 4 ... 256 chunks

__constant__ uint32_t kCrcShift[kCrcShiftLevels][32];
__device__ uint32_t g_crc_slices[8][256];

__device__ uint32_t ApplyOperator(const uint32_t* column, uint32_t crc) {
  uint32_t out = 0;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    if ((crc >> i) & 1) out ^= column[i];
  }
  return out;
}

__device__ uint32_t Slice8(const uint32_t (*t)[256], uint32_t crc, uint32_t lo, uint32_t hi) {
  const uint32_t one = lo ^ crc;
  return t[7][one & 0xFF] ^ t[6][(one >> 8) & 0xFF] ^ t[5][(one >> 16) & 0xFF] ^ t[4][one >> 24] ^
         t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
}

__global__ void CrcBlocksKernel(const unsigned char* data, uint64_t full_chunks, bool aligned,
                                uint32_t* out) {
  __shared__ uint32_t t[8][256];
  __shared__ uint32_t crcs[kCrcThreads];
  for (unsigned i = threadIdx.x; i < 8 * 256; i += blockDim.x) {
    (&t[0][0])[i] = (&g_crc_slices[0][0])[i];
  }
  __syncthreads();
  const uint64_t first = blockIdx.x * static_cast<uint64_t>(kCrcThreads);
  const uint64_t chunk = first + threadIdx.x;
  const uint64_t m =
      full_chunks - first < kCrcThreads ? full_chunks - first : static_cast<uint64_t>(kCrcThreads);
  uint32_t crc = 0;
  if (chunk < full_chunks) {
    uint32_t c = 0xFFFFFFFFu;
    const unsigned char* p = data + chunk * kCrcChunk;
    if (aligned) {
      const uint4* v = reinterpret_cast<const uint4*>(p);
      for (uint64_t i = 0; i < kCrcChunk / 16; ++i) {
        const uint4 w = v[i];
        c = Slice8(t, c, w.x, w.y);
        c = Slice8(t, c, w.z, w.w);
      }
    } else {
      for (uint64_t i = 0; i < kCrcChunk; ++i) c = t[0][(c ^ p[i]) & 0xFF] ^ (c >> 8);
    }
    crc = c ^ 0xFFFFFFFFu;
  }
  crcs[threadIdx.x] = crc;
  __syncthreads();
  for (unsigned stride = 1; stride < kCrcThreads; stride *= 2) {
    const unsigned i = threadIdx.x;
    if (i % (2 * stride) == 0 && i + stride < m) {
      uint64_t right = m - (i + stride) < stride ? m - (i + stride) : stride;
      uint32_t left = crcs[i];
      for (int bit = 0; right != 0; ++bit, right >>= 1) {
        if (right & 1) left = ApplyOperator(kCrcShift[bit], left);
      }
      crcs[i] = left ^ crcs[i + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = crcs[0];
}

__global__ void CrcTailKernel(const unsigned char* data, uint64_t bytes, uint32_t* out) {
  uint32_t c = 0xFFFFFFFFu;
  for (uint64_t i = 0; i < bytes; ++i) c = g_crc_slices[0][(c ^ data[i]) & 0xFF] ^ (c >> 8);
  *out = c ^ 0xFFFFFFFFu;
}

// The coalesced variant: each warp takes a 64 KiB span and reads it 512 bytes at a time, lane j
// taking bytes [16j, 16j + 16) of every 512, so every load is one contiguous 512-byte transaction.
// Lane j keeps acc_j = XOR over segments s of shift(512 (S - 1 - s)) R(word_sj) (Horner: acc =
// shift512(acc) ^ R(word)), R being the raw register from state 0; the span's raw register is
// XOR_j shift(16 (31 - j)) acc_j, and its standalone CRC adds the conditioning (see the host test
// ChecksumMath.CoalescedSpanDecompositionEqualsTheSerialValue).
constexpr uint64_t kSpanBytes = 64 << 10;

__device__ uint32_t g_shift512[4][256];    // "append 512 zero bytes", one table per register byte
__device__ uint32_t g_lane_shift[32][32];  // "append 16 (31 - lane) zero bytes", as columns
__device__ uint32_t g_span_conditioning;   // ZeroBytes(kSpanBytes)(~0) ^ ~0

__global__ void CrcSpansKernel(const unsigned char* data, uint64_t spans, uint32_t* out) {
  __shared__ uint32_t t[8][256];
  __shared__ uint32_t shift[4][256];
  for (unsigned i = threadIdx.x; i < 8 * 256; i += blockDim.x) {
    (&t[0][0])[i] = (&g_crc_slices[0][0])[i];
  }
  for (unsigned i = threadIdx.x; i < 4 * 256; i += blockDim.x) {
    (&shift[0][0])[i] = (&g_shift512[0][0])[i];
  }
  __syncthreads();
  const uint64_t span = (blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x & 31;
  if (span >= spans) return;
  const uint4* p = reinterpret_cast<const uint4*>(data + span * kSpanBytes) + lane;
  uint32_t acc = 0;
  for (uint64_t seg = 0; seg < kSpanBytes / 512; ++seg) {
    const uint4 w = p[seg * 32];
    uint32_t r = Slice8(t, 0, w.x, w.y);
    r = Slice8(t, r, w.z, w.w);
    acc = shift[0][acc & 0xFF] ^ shift[1][(acc >> 8) & 0xFF] ^ shift[2][(acc >> 16) & 0xFF] ^
          shift[3][acc >> 24] ^ r;
  }
  uint32_t mine = ApplyOperator(g_lane_shift[lane], acc);
  for (int offset = 16; offset > 0; offset /= 2) mine ^= __shfl_xor_sync(0xFFFFFFFFu, mine, offset);
  if (lane == 0) out[span] = mine ^ g_span_conditioning;
}

// Tables are per device; a daemon or client may checksum on several.
std::mutex g_tables_mu;
std::set<int> g_tables_ready;

absl::Status EnsureTables() {
  int device = 0;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(g_tables_mu);
  if (g_tables_ready.count(device) != 0) return absl::OkStatus();
  uint32_t slices[8][256];
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    slices[0][i] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (int i = 0; i < 256; ++i) {
      slices[k][i] = (slices[k - 1][i] >> 8) ^ slices[0][slices[k - 1][i] & 0xFF];
    }
  }
  uint32_t shift[kCrcShiftLevels][32];
  for (int level = 0; level < kCrcShiftLevels; ++level) {
    const Crc32Operator op = Crc32Operator::ZeroBytes(kCrcChunk << level);
    std::memcpy(shift[level], op.column, sizeof(op.column));
  }
  uint32_t shift512[4][256];
  const Crc32Operator op512 = Crc32Operator::ZeroBytes(512);
  for (int b = 0; b < 4; ++b) {
    for (uint32_t v = 0; v < 256; ++v) shift512[b][v] = op512.Apply(v << (8 * b));
  }
  uint32_t lane_shift[32][32];
  for (int lane = 0; lane < 32; ++lane) {
    const Crc32Operator op = Crc32Operator::ZeroBytes(16 * (31 - lane));
    std::memcpy(lane_shift[lane], op.column, sizeof(op.column));
  }
  const uint32_t conditioning = Crc32Operator::ZeroBytes(kSpanBytes).Apply(~0u) ^ ~0u;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyToSymbol(g_shift512, shift512, sizeof(shift512)));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyToSymbol(g_lane_shift, lane_shift, sizeof(lane_shift)));
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaMemcpyToSymbol(g_span_conditioning, &conditioning, sizeof(conditioning)));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyToSymbol(g_crc_slices, slices, sizeof(slices)));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyToSymbol(kCrcShift, shift, sizeof(shift)));
  g_tables_ready.insert(device);
  return absl::OkStatus();
}

}  // namespace

absl::Status BatchedCopy(const std::vector<CopyItem>& items, cudaStream_t stream,
                         std::vector<uint8_t>* scratch_host, void** scratch_device,
                         size_t* scratch_capacity) {
  std::vector<WorkItem> work;
  for (const CopyItem& it : items) {
    for (uint64_t off = 0; off < it.bytes; off += kCopyChunk) {
      const uint64_t n = it.bytes - off < kCopyChunk ? it.bytes - off : kCopyChunk;
      work.push_back(WorkItem{static_cast<const unsigned char*>(it.src) + off,
                              static_cast<unsigned char*>(it.dst) + off, n});
    }
  }
  if (work.empty()) return absl::OkStatus();
  const size_t need = work.size() * sizeof(WorkItem);
  if (*scratch_capacity < need) {
    if (*scratch_device != nullptr) WSYNC_CUDA_RETURN_IF_ERROR(cudaFree(*scratch_device));
    *scratch_device = nullptr;
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(scratch_device, need));
    *scratch_capacity = need;
  }
  scratch_host->resize(need);
  std::memcpy(scratch_host->data(), work.data(), need);
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(*scratch_device, scratch_host->data(), need, cudaMemcpyHostToDevice, stream));
  CopyKernel<<<static_cast<unsigned>(work.size()), 512, 0, stream>>>(
      static_cast<const WorkItem*>(*scratch_device));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> DeviceCrc32(const void* data, uint64_t bytes, cudaStream_t stream) {
  if (bytes == 0) return 0u;
  if (absl::Status s = EnsureTables(); !s.ok()) return s;
  const auto* p = static_cast<const unsigned char*>(data);
  const uint64_t full = bytes / kCrcChunk;
  const uint64_t blocks = (full + kCrcThreads - 1) / kCrcThreads;
  const uint64_t tail = bytes - full * kCrcChunk;
  const uint64_t results = blocks + 1;
  uint32_t* out = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaMallocAsync(reinterpret_cast<void**>(&out), results * sizeof(uint32_t), stream));
  if (blocks > 0) {
    const bool aligned = (reinterpret_cast<uintptr_t>(p) & 15) == 0;
    CrcBlocksKernel<<<static_cast<unsigned>(blocks), kCrcThreads, 0, stream>>>(p, full, aligned,
                                                                               out);
  }
  CrcTailKernel<<<1, 1, 0, stream>>>(p + full * kCrcChunk, tail, out + blocks);
  cudaError_t err = cudaGetLastError();
  std::vector<uint32_t> crcs(results);
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(crcs.data(), out, results * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                          stream);
  }
  cudaFreeAsync(out, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return WSYNC_CUDA_STATUS(err);
  static const Crc32Operator kWholeBlock = Crc32Operator::ZeroBytes(kCrcChunk * kCrcThreads);
  uint32_t crc = 0;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t len = std::min<uint64_t>(kCrcThreads, full - b * kCrcThreads) * kCrcChunk;
    if (b == 0) {
      crc = crcs[0];
    } else if (len == kCrcChunk * kCrcThreads) {
      crc = kWholeBlock.Apply(crc) ^ crcs[b];
    } else {
      crc = Crc32Combine(crc, crcs[b], len);
    }
  }
  return blocks == 0 ? crcs[blocks] : Crc32Combine(crc, crcs[blocks], tail);
}

absl::StatusOr<uint32_t> DeviceCrc32Coalesced(const void* data, uint64_t bytes,
                                              cudaStream_t stream) {
  const auto* p = static_cast<const unsigned char*>(data);
  const uint64_t spans = bytes / kSpanBytes;
  if (spans == 0 || (reinterpret_cast<uintptr_t>(p) & 15) != 0) {
    return DeviceCrc32(data, bytes, stream);
  }
  if (absl::Status s = EnsureTables(); !s.ok()) return s;
  uint32_t* out = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaMallocAsync(reinterpret_cast<void**>(&out), spans * sizeof(uint32_t), stream));
  constexpr unsigned kThreads = 256;  // 8 spans per block
  const uint64_t blocks = (spans * 32 + kThreads - 1) / kThreads;
  CrcSpansKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, spans, out);
  cudaError_t err = cudaGetLastError();
  std::vector<uint32_t> crcs(spans);
  if (err == cudaSuccess) {
    err =
        cudaMemcpyAsync(crcs.data(), out, spans * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream);
  }
  cudaFreeAsync(out, stream);
  if (err != cudaSuccess) return WSYNC_CUDA_STATUS(err);
  // The rest (under one span) goes through the chunked kernel, which synchronises the stream
  // and so also waits for the copy above.
  const uint64_t rest = bytes - spans * kSpanBytes;
  auto rest_crc = DeviceCrc32(p + spans * kSpanBytes, rest, stream);
  if (!rest_crc.ok()) return rest_crc.status();
  if (rest == 0) {
    if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
      return WSYNC_CUDA_STATUS(e);
    }
  }
  static const Crc32Operator kWholeSpan = Crc32Operator::ZeroBytes(kSpanBytes);
  uint32_t crc = crcs[0];
  for (uint64_t i = 1; i < spans; ++i) crc = kWholeSpan.Apply(crc) ^ crcs[i];
  return rest == 0 ? crc : Crc32Combine(crc, *rest_crc, rest);
}

}  // namespace wsync::cuda
