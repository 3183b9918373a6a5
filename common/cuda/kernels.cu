#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/cuda/cuda_resources.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/kernels.h"
#include "common/status_macros.h"

namespace wsync::cuda {
namespace {

// One kernel does both jobs. Block b owns bytes [b * kThreads * chunk, (b + 1) * kThreads * chunk)
// of the destination: it first copies the pieces of the work list that fall there (all threads on
// each piece, 16-byte accesses where the alignment allows), then each thread checksums one chunk of
// the range (slicing-by-8 tables in shared memory) and the block merges its chunk CRCs pairwise
// with "append n zero bytes" operators (Crc32Operator). The host merges the blocks' CRCs.
constexpr unsigned kThreads = 256;
constexpr int kShiftLevels = 8;  // merges of runs of 1, 2, 4 ... 128 chunks
constexpr int kVariants = sizeof(kCrcChunkSizes) / sizeof(kCrcChunkSizes[0]);

struct DeviceItem {
  const unsigned char* src;
  uint64_t offset;
  uint64_t bytes;
};

__device__ __forceinline__ uint64_t Min(uint64_t a, uint64_t b) { return a < b ? a : b; }
__device__ __forceinline__ uint64_t Max(uint64_t a, uint64_t b) { return a > b ? a : b; }

__constant__ uint32_t kShift[kVariants][kShiftLevels][32];
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

// All threads of the block copy n bytes. The widest access both pointers allow after aligning
// the destination; four loads in flight per thread so the copy runs at memory speed.
template <typename Word>
__device__ void CopyWords(unsigned char* dst, const unsigned char* src, uint64_t words) {
  auto* d = reinterpret_cast<Word*>(dst);
  auto* s = reinterpret_cast<const Word*>(src);
  const uint64_t step = blockDim.x;
  uint64_t i = threadIdx.x;
  for (; i + 3 * step < words; i += 4 * step) {
    const Word a = s[i], b = s[i + step], c = s[i + 2 * step], e = s[i + 3 * step];
    d[i] = a;
    d[i + step] = b;
    d[i + 2 * step] = c;
    d[i + 3 * step] = e;
  }
  for (; i < words; i += step) d[i] = s[i];
}

__device__ void CopyPiece(unsigned char* dst, const unsigned char* src, uint64_t n) {
  const uint64_t head = Min((16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15, n);
  for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
  dst += head;
  src += head;
  n -= head;
  const uintptr_t misalign = reinterpret_cast<uintptr_t>(src) & 15;
  uint64_t done;
  if (misalign == 0) {
    CopyWords<uint4>(dst, src, n / 16);
    done = n / 16 * 16;
  } else if (misalign % 4 == 0) {
    CopyWords<uint32_t>(dst, src, n / 4);
    done = n / 4 * 4;
  } else if (misalign % 2 == 0) {
    CopyWords<uint16_t>(dst, src, n / 2);
    done = n / 2 * 2;
  } else {
    done = 0;
  }
  for (uint64_t i = done + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// out: one CRC per block, then the CRC of the tail after the last full chunk (written by the last
// block, which holds it). It lies in pinned host memory: no copy back is queued after the kernel.
template <uint32_t kChunk, int kVariant, bool kCopy, bool kCrc>
__global__ void BucketKernel(unsigned char* data, uint64_t extent, uint64_t full_chunks,
                             uint64_t span, bool aligned, const DeviceItem* items, uint32_t n_items,
                             uint32_t* out) {
  constexpr uint64_t kBlockBytes = static_cast<uint64_t>(kThreads) * kChunk;
  const uint64_t lo = blockIdx.x * kBlockBytes;
  if constexpr (kCopy) {
    const uint64_t hi = Min(lo + kBlockBytes, extent);
    __shared__ uint32_t first;
    if (threadIdx.x == 0) {
      // The last item starting at or before lo (items are sorted by offset).
      uint32_t a = 0, b = n_items;
      while (b - a > 1) {
        const uint32_t mid = (a + b) / 2;
        if (items[mid].offset <= lo)
          a = mid;
        else
          b = mid;
      }
      first = a;
    }
    __syncthreads();
    for (uint32_t i = first; i < n_items && items[i].offset < hi; ++i) {
      const DeviceItem it = items[i];
      const uint64_t from = Max(lo, it.offset);
      const uint64_t to = Min(hi, it.offset + it.bytes);
      if (from < to) CopyPiece(data + from, it.src + (from - it.offset), to - from);
    }
    // Makes the block's writes visible to all its threads before they checksum them.
    __syncthreads();
  }
  if constexpr (kCrc) {
    __shared__ uint32_t t[8][256];
    __shared__ uint32_t crcs[kThreads];
    for (unsigned i = threadIdx.x; i < 8 * 256; i += blockDim.x) {
      (&t[0][0])[i] = (&g_crc_slices[0][0])[i];
    }
    __syncthreads();
    const uint64_t first_chunk = blockIdx.x * static_cast<uint64_t>(kThreads);
    const uint64_t chunk = first_chunk + threadIdx.x;
    const uint64_t m = full_chunks > first_chunk ? Min(full_chunks - first_chunk, kThreads) : 0;
    uint32_t crc = 0;
    if (chunk < full_chunks) {
      uint32_t c = 0xFFFFFFFFu;
      const unsigned char* p = data + chunk * kChunk;
      if (aligned) {
        // 32 bytes (a whole sector) per step; .cg reads the copy phase's writes from L2.
        const uint4* v = reinterpret_cast<const uint4*>(p);
#pragma unroll 4
        for (uint32_t i = 0; i < kChunk / 16; i += 2) {
          const uint4 w0 = __ldcg(v + i);
          const uint4 w1 = __ldcg(v + i + 1);
          c = Slice8(t, c, w0.x, w0.y);
          c = Slice8(t, c, w0.z, w0.w);
          c = Slice8(t, c, w1.x, w1.y);
          c = Slice8(t, c, w1.z, w1.w);
        }
      } else {
        for (uint32_t i = 0; i < kChunk; ++i) c = t[0][(c ^ __ldcg(p + i)) & 0xFF] ^ (c >> 8);
      }
      crc = c ^ 0xFFFFFFFFu;
    }
    crcs[threadIdx.x] = crc;
    __syncthreads();
    for (unsigned stride = 1; stride < kThreads; stride *= 2) {
      const unsigned i = threadIdx.x;
      if (i % (2 * stride) == 0 && i + stride < m) {
        uint64_t right = Min(m - (i + stride), stride);
        uint32_t left = crcs[i];
        for (int bit = 0; right != 0; ++bit, right >>= 1) {
          if (right & 1) left = ApplyOperator(kShift[kVariant][bit], left);
        }
        crcs[i] = left ^ crcs[i + stride];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = crcs[0];
    if (threadIdx.x == 0 && blockIdx.x == gridDim.x - 1) {
      uint32_t c = 0xFFFFFFFFu;
      for (uint64_t i = full_chunks * kChunk; i < span; ++i) {
        c = t[0][(c ^ __ldcg(data + i)) & 0xFF] ^ (c >> 8);
      }
      out[gridDim.x] = c ^ 0xFFFFFFFFu;
    }
  }
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
  static uint32_t shift[kVariants][kShiftLevels][32];
  for (int v = 0; v < kVariants; ++v) {
    for (int level = 0; level < kShiftLevels; ++level) {
      const Crc32Operator op = Crc32Operator::ZeroBytes(uint64_t{kCrcChunkSizes[v]} << level);
      std::memcpy(shift[v][level], op.column, sizeof(op.column));
    }
  }
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyToSymbol(g_crc_slices, slices, sizeof(slices)));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyToSymbol(kShift, shift, sizeof(shift)));
  g_tables_ready.insert(device);
  return absl::OkStatus();
}

int VariantOf(uint32_t chunk_bytes) {
  for (int v = 0; v < kVariants; ++v) {
    if (kCrcChunkSizes[v] == chunk_bytes) return v;
  }
  return -1;
}

// "Append one whole block of zero bytes", as byte tables, per chunk size.
const Crc32OperatorTable& WholeBlock(int variant) {
  static const auto* tables = [] {
    auto* t = new std::array<Crc32OperatorTable, kVariants>();
    for (int v = 0; v < kVariants; ++v) {
      (*t)[v] =
          Crc32OperatorTable(Crc32Operator::ZeroBytes(uint64_t{kThreads} * kCrcChunkSizes[v]));
    }
    return t;
  }();
  return (*tables)[variant];
}

template <bool kCopy, bool kCrc, uint32_t kChunk, int kVariant>
void LaunchFor(uint64_t blocks, cudaStream_t stream, unsigned char* data, uint64_t extent,
               uint64_t full_chunks, uint64_t span, bool aligned, const DeviceItem* items,
               uint32_t n_items, uint32_t* out) {
  BucketKernel<kChunk, kVariant, kCopy, kCrc>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(data, extent, full_chunks, span,
                                                               aligned, items, n_items, out);
}

template <bool kCopy, bool kCrc>
void Launch(int variant, uint64_t blocks, cudaStream_t stream, unsigned char* data, uint64_t extent,
            uint64_t full_chunks, uint64_t span, bool aligned, const DeviceItem* items,
            uint32_t n_items, uint32_t* out) {
  switch (variant) {
    case 0:
      return LaunchFor<kCopy, kCrc, kCrcChunkSizes[0], 0>(blocks, stream, data, extent, full_chunks,
                                                          span, aligned, items, n_items, out);
    case 1:
      return LaunchFor<kCopy, kCrc, kCrcChunkSizes[1], 1>(blocks, stream, data, extent, full_chunks,
                                                          span, aligned, items, n_items, out);
    case 2:
      return LaunchFor<kCopy, kCrc, kCrcChunkSizes[2], 2>(blocks, stream, data, extent, full_chunks,
                                                          span, aligned, items, n_items, out);
    default:
      return LaunchFor<kCopy, kCrc, kCrcChunkSizes[3], 3>(blocks, stream, data, extent, full_chunks,
                                                          span, aligned, items, n_items, out);
  }
}

}  // namespace

// The one place that drives the kernel: stages the work list, launches, merges the CRCs.
class BucketKernels {
 public:
  // items may be empty (checksum only); span 0 with checksum false is a plain copy.
  static absl::StatusOr<uint32_t> Run(const std::vector<CopyItem>& items, unsigned char* dst,
                                      uint64_t span, bool checksum, uint32_t chunk_bytes,
                                      cudaStream_t stream, KernelScratch* scratch) {
    const int variant = VariantOf(chunk_bytes);
    if (variant < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported checksum chunk of ", chunk_bytes, " bytes"));
    }
    if (checksum) WSYNC_RETURN_IF_ERROR(EnsureTables());
    std::vector<DeviceItem> work;
    work.reserve(items.size());
    uint64_t extent = checksum ? span : 0;
    for (const CopyItem& it : items) {
      if (it.bytes == 0) continue;
      work.push_back(DeviceItem{static_cast<const unsigned char*>(it.src), it.offset, it.bytes});
      extent = std::max(extent, it.offset + it.bytes);
    }
    std::sort(work.begin(), work.end(),
              [](const DeviceItem& a, const DeviceItem& b) { return a.offset < b.offset; });
    for (size_t i = 1; i < work.size(); ++i) {
      if (work[i - 1].offset + work[i - 1].bytes > work[i].offset) {
        return absl::InvalidArgumentError(
            absl::StrCat("copies overlap at destination offset ", work[i].offset));
      }
    }
    if (checksum && extent > span) {
      // The last block checksums the tail; bytes past the span would be another block's.
      return absl::InvalidArgumentError(
          absl::StrCat("copies reach byte ", extent, ", past the checksummed span of ", span));
    }
    if (extent == 0) return 0u;
    const uint64_t block_bytes = uint64_t{kThreads} * chunk_bytes;
    const uint64_t blocks = (extent + block_bytes - 1) / block_bytes;
    if (blocks > 0x7FFFFFFFu) return absl::OutOfRangeError("bucket too large for one launch");
    const uint64_t full_chunks = checksum ? span / chunk_bytes : 0;
    const uint64_t tail = checksum ? span - full_chunks * chunk_bytes : 0;
    WSYNC_RETURN_IF_ERROR(
        scratch->Reserve(work.size() * sizeof(DeviceItem), checksum ? blocks + 1 : 0));
    // The previous launch may still read the device work list.
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(scratch->last_use_));
    const auto* device_items = static_cast<const DeviceItem*>(scratch->device_items_);
    if (!work.empty()) {
      std::memcpy(scratch->host_items_, work.data(), work.size() * sizeof(DeviceItem));
      WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(scratch->device_items_, scratch->host_items_,
                                                 work.size() * sizeof(DeviceItem),
                                                 cudaMemcpyHostToDevice, stream));
    }
    const bool aligned = (reinterpret_cast<uintptr_t>(dst) & 15) == 0;
    const auto n_items = static_cast<uint32_t>(work.size());
    // Pinned memory is addressable from the kernel (unified addressing).
    uint32_t* out = scratch->host_results_;
    const bool copy = !work.empty();
    if (copy && checksum) {
      Launch<true, true>(variant, blocks, stream, dst, extent, full_chunks, span, aligned,
                         device_items, n_items, out);
    } else if (copy) {
      Launch<true, false>(variant, blocks, stream, dst, extent, 0, 0, aligned, device_items,
                          n_items, nullptr);
    } else {
      Launch<false, true>(variant, blocks, stream, dst, extent, full_chunks, span, aligned, nullptr,
                          0, out);
    }
    WSYNC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(scratch->last_use_, stream));
    if (!checksum) return 0u;
    // The kernel wrote the results to pinned memory: no copy back is queued after it, since on a
    // GPU shared with another process every queued operation may wait for a time slice.
    WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    const Crc32OperatorTable& whole = WholeBlock(variant);
    uint32_t crc = 0;
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint64_t first = b * kThreads;
      if (first >= full_chunks) break;
      const uint64_t len = std::min<uint64_t>(kThreads, full_chunks - first) * chunk_bytes;
      const uint32_t part = scratch->host_results_[b];
      crc = len == block_bytes ? whole.Apply(crc) ^ part : Crc32Combine(crc, part, len);
    }
    return tail == 0 ? crc : Crc32Combine(crc, scratch->host_results_[blocks], tail);
  }
};

absl::StatusOr<std::unique_ptr<KernelScratch>> KernelScratch::Create(int device) {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  cudaEvent_t e = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return std::unique_ptr<KernelScratch>(new KernelScratch(device, e));
}

KernelScratch::~KernelScratch() {
  auto guard = DeviceGuard::Create(device_);
  cudaEventSynchronize(last_use_);
  cudaEventDestroy(last_use_);
  cudaFreeHost(host_items_);
  cudaFree(device_items_);
  cudaFreeHost(host_results_);
}

absl::Status KernelScratch::Reserve(size_t item_bytes, size_t result_count) {
  if (item_bytes > item_capacity_) {
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(last_use_));
    const size_t want = std::max(item_bytes, item_capacity_ * 2);
    cudaFreeHost(host_items_);
    cudaFree(device_items_);
    host_items_ = device_items_ = nullptr;
    item_capacity_ = 0;
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&host_items_, want));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMalloc(&device_items_, want));
    item_capacity_ = want;
  }
  if (result_count > result_capacity_) {
    const size_t want = std::max(result_count, result_capacity_ * 2);
    // The kernel writing them may still run.
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(last_use_));
    cudaFreeHost(host_results_);
    host_results_ = nullptr;
    result_capacity_ = 0;
    WSYNC_CUDA_RETURN_IF_ERROR(
        cudaMallocHost(reinterpret_cast<void**>(&host_results_), want * sizeof(uint32_t)));
    result_capacity_ = want;
  }
  return absl::OkStatus();
}

absl::Status BatchedCopy(const std::vector<CopyItem>& items, void* dst, cudaStream_t stream,
                         KernelScratch* scratch) {
  return BucketKernels::Run(items, static_cast<unsigned char*>(dst), 0, false, kDefaultCrcChunk,
                            stream, scratch)
      .status();
}

absl::StatusOr<uint32_t> CopyAndCrc32(const std::vector<CopyItem>& items, void* dst, uint64_t span,
                                      cudaStream_t stream, KernelScratch* scratch) {
  return BucketKernels::Run(items, static_cast<unsigned char*>(dst), span, true, kDefaultCrcChunk,
                            stream, scratch);
}

absl::StatusOr<uint32_t> DeviceCrc32(const void* data, uint64_t bytes, cudaStream_t stream,
                                     KernelScratch* scratch, uint32_t chunk_bytes) {
  return BucketKernels::Run({}, static_cast<unsigned char*>(const_cast<void*>(data)), bytes, true,
                            chunk_bytes, stream, scratch);
}

}  // namespace wsync::cuda
