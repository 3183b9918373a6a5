#include <cuda_runtime_api.h>

#include <cstring>

#include "common/checksum.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/kernels.h"

namespace wsync::cuda {
namespace {

constexpr uint64_t kCopyChunk = 1 << 20;
constexpr uint64_t kCrcChunk = 64 << 10;

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

__constant__ uint32_t kCrcTable[256];

__global__ void CrcChunksKernel(const unsigned char* data, uint64_t bytes, uint32_t* out,
                                uint64_t chunks) {
  const uint64_t c = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (c >= chunks) return;
  const uint64_t begin = c * kCrcChunk;
  const uint64_t end = begin + kCrcChunk < bytes ? begin + kCrcChunk : bytes;
  uint32_t crc = 0xFFFFFFFFu;
  for (uint64_t i = begin; i < end; ++i) crc = kCrcTable[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  out[c] = crc ^ 0xFFFFFFFFu;
}

bool g_table_ready = false;

absl::Status EnsureTable() {
  if (g_table_ready) return absl::OkStatus();
  uint32_t table[256];
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyToSymbol(kCrcTable, table, sizeof(table)));
  g_table_ready = true;
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
  if (absl::Status s = EnsureTable(); !s.ok()) return s;
  const uint64_t chunks = (bytes + kCrcChunk - 1) / kCrcChunk;
  uint32_t* out = nullptr;
  WSYNC_CUDA_RETURN_IF_ERROR(
      cudaMallocAsync(reinterpret_cast<void**>(&out), chunks * sizeof(uint32_t), stream));
  const unsigned threads = 128;
  CrcChunksKernel<<<static_cast<unsigned>((chunks + threads - 1) / threads), threads, 0, stream>>>(
      static_cast<const unsigned char*>(data), bytes, out, chunks);
  std::vector<uint32_t> crcs(chunks);
  cudaError_t err =
      cudaMemcpyAsync(crcs.data(), out, chunks * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream);
  cudaFreeAsync(out, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return WSYNC_CUDA_STATUS(err);
  uint32_t crc = crcs[0];
  for (uint64_t c = 1; c < chunks; ++c) {
    const uint64_t len = c + 1 < chunks ? kCrcChunk : bytes - c * kCrcChunk;
    crc = Crc32Combine(crc, crcs[c], len);
  }
  return crc;
}

}  // namespace wsync::cuda
