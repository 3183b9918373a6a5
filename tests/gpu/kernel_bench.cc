// Bandwidth of the kernels on the sending GPU's critical path (the trainer's bucket copy and the
// checksums on both sides), nccl-tests style, against cudaMemcpy as the reference. Each line
// checks that the fused copy+checksum and every checksum chunk size agree.
//
//   kernel_bench [--device 0] [--sizes 128,256,1024,4096 (MiB)] [--reps 5]

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda/cuda_resources.h"
#include "common/cuda/kernels.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename Fn>
double BestSeconds(int reps, Fn fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    if (!fn()) return -1;
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

double gib(uint64_t bytes) { return static_cast<double>(bytes) / (1ull << 30); }

}  // namespace

int main(int argc, char** argv) {
  int device = 0, reps = 5;
  std::vector<uint64_t> sizes_mib = {128, 256, 1024, 4096};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--device") device = std::atoi(argv[i + 1]);
    if (flag == "--reps") reps = std::atoi(argv[i + 1]);
    if (flag == "--sizes") {
      sizes_mib.clear();
      for (char* tok = std::strtok(argv[i + 1], ","); tok; tok = std::strtok(nullptr, ",")) {
        sizes_mib.push_back(std::strtoull(tok, nullptr, 10));
      }
    }
  }
  if (cudaSetDevice(device) != cudaSuccess) {
    std::fprintf(stderr, "kernel_bench: no CUDA device %d\n", device);
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  std::printf("# kernel bandwidth on device %d (%s), best of %d; GiB/s of the buffer size\n",
              device, prop.name, reps);
  std::printf(
      "#   size(MiB)  memcpy-d2d  batched-copy  copy-engines  copy+crc32  crc32/512  "
      "crc32/1K  crc32/2K  crc32/4K  agree\n");
  int rc = 0;
  auto scratch = wsync::cuda::KernelScratch::Create(device);
  auto stream = wsync::cuda::Stream::Create(device);
  if (!scratch.ok() || !stream.ok()) {
    std::fprintf(stderr, "kernel_bench: no scratch or stream\n");
    return 2;
  }
  cudaStream_t s = (*stream)->get();
  for (uint64_t mib : sizes_mib) {
    const uint64_t bytes = mib << 20;
    auto src = wsync::cuda::DeviceBuffer::Create(device, bytes);
    auto dst = wsync::cuda::DeviceBuffer::Create(device, bytes);
    if (!src.ok() || !dst.ok()) {
      std::fprintf(stderr, "kernel_bench: allocation of %llu MiB failed\n",
                   static_cast<unsigned long long>(mib));
      return 2;
    }
    cudaMemset((*src)->data(), 0x5A, bytes);
    cudaMemset((*src)->data(), 0x13, bytes / 3);
    cudaDeviceSynchronize();
    auto* from = static_cast<char*>((*src)->data());
    auto* to = static_cast<char*>((*dst)->data());
    // A model's bucket: 339 unequal pieces back to back (Qwen2.5-7B has 339 tensors).
    std::vector<wsync::cuda::CopyItem> items;
    const uint64_t piece = bytes / 339 / 16 * 16;
    for (uint64_t off = 0; off < bytes; off += piece) {
      items.push_back({from + off, off, std::min(piece, bytes - off)});
    }
    const double memcpy_s = BestSeconds(reps, [&] {
      return cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, s) == cudaSuccess &&
             cudaStreamSynchronize(s) == cudaSuccess;
    });
    const double batched_s = BestSeconds(reps, [&] {
      return wsync::cuda::BatchedCopy(items, to, s, scratch->get()).ok() &&
             cudaStreamSynchronize(s) == cudaSuccess;
    });
    // The same pieces through the copy engines (cudaMemcpyBatchAsync, "prefer overlap with
    // compute"): DMA is scheduled apart from the SMs, which another process may be holding.
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<size_t> lens;
    for (const auto& it : items) {
      dsts.push_back(to + it.offset);
      srcs.push_back(it.src);
      lens.push_back(it.bytes);
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t attr_index = 0;
    const double ce_s = BestSeconds(reps, [&] {
      return cudaMemcpyBatchAsync(dsts.data(), srcs.data(), lens.data(), lens.size(), &attr,
                                  &attr_index, 1, s) == cudaSuccess &&
             cudaStreamSynchronize(s) == cudaSuccess;
    });
    uint32_t fused = 0;
    const double fused_s = BestSeconds(reps, [&] {
      auto c = wsync::cuda::CopyAndCrc32(items, to, bytes, s, scratch->get());
      if (c.ok()) fused = *c;
      return c.ok();
    });
    std::printf("%13llu %11.1f %13.1f %13.1f %11.1f", static_cast<unsigned long long>(mib),
                gib(bytes) / memcpy_s, gib(bytes) / batched_s, gib(bytes) / ce_s,
                gib(bytes) / fused_s);
    bool agree = fused_s > 0;
    for (uint32_t chunk : wsync::cuda::kCrcChunkSizes) {
      uint32_t crc = 0;
      const double crc_s = BestSeconds(reps, [&] {
        auto c = wsync::cuda::DeviceCrc32(to, bytes, s, scratch->get(), chunk);
        if (c.ok()) crc = *c;
        return c.ok();
      });
      agree = agree && crc_s > 0 && crc == fused;
      std::printf(" %10.1f", gib(bytes) / crc_s);
    }
    std::printf("  %s\n", agree ? "yes" : "NO");
    if (!agree) rc = 1;
  }
  return rc;
}
