// Bandwidth of the kernels on the sending GPU's critical path (the trainer's bucket copy and the
// checksums on both sides), nccl-tests style, against cudaMemcpy as the reference. Each line
// checks that the two checksum kernels agree.
//
//   kernel_bench [--device 0] [--sizes 128,1024,4096 (MiB)] [--reps 5]

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

}  // namespace

int main(int argc, char** argv) {
  int device = 0, reps = 5;
  std::vector<uint64_t> sizes_mib = {128, 1024, 4096};
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
      "#   size(MiB)  memcpy-d2d  batched-copy(339 pieces)  crc32-chunked  crc32-coalesced  "
      "agree\n");
  int rc = 0;
  for (uint64_t mib : sizes_mib) {
    const uint64_t bytes = mib << 20;
    auto src = wsync::cuda::DeviceBuffer::Create(device, bytes);
    auto dst = wsync::cuda::DeviceBuffer::Create(device, bytes);
    auto stream = wsync::cuda::Stream::Create(device);
    if (!src.ok() || !dst.ok() || !stream.ok()) {
      std::fprintf(stderr, "kernel_bench: allocation of %llu MiB failed\n",
                   static_cast<unsigned long long>(mib));
      return 2;
    }
    cudaMemset((*src)->data(), 0x5A, bytes);
    cudaMemset((*src)->data(), 0x13, bytes / 3);
    cudaDeviceSynchronize();
    cudaStream_t s = (*stream)->get();
    auto* from = static_cast<char*>((*src)->data());
    auto* to = static_cast<char*>((*dst)->data());
    // A model's bucket: unequal pieces back to back.
    std::vector<wsync::cuda::CopyItem> items;
    const uint64_t piece = bytes / 339;
    for (uint64_t off = 0; off < bytes; off += piece) {
      items.push_back({from + off, to + off, std::min(piece, bytes - off)});
    }
    std::vector<uint8_t> scratch_host;
    void* scratch = nullptr;
    size_t capacity = 0;
    const double memcpy_s = BestSeconds(reps, [&] {
      return cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, s) == cudaSuccess &&
             cudaStreamSynchronize(s) == cudaSuccess;
    });
    const double batched_s = BestSeconds(reps, [&] {
      return wsync::cuda::BatchedCopy(items, s, &scratch_host, &scratch, &capacity).ok() &&
             cudaStreamSynchronize(s) == cudaSuccess;
    });
    uint32_t chunked = 0, coalesced = 0;
    const double chunked_s = BestSeconds(reps, [&] {
      auto c = wsync::cuda::DeviceCrc32(to, bytes, s);
      if (c.ok()) chunked = *c;
      return c.ok();
    });
    const double coalesced_s = BestSeconds(reps, [&] {
      auto c = wsync::cuda::DeviceCrc32Coalesced(to, bytes, s);
      if (c.ok()) coalesced = *c;
      return c.ok();
    });
    if (scratch != nullptr) cudaFree(scratch);
    const double gib = static_cast<double>(bytes) / (1ull << 30);
    const bool agree = chunked == coalesced && chunked_s > 0 && coalesced_s > 0;
    std::printf("%13llu %11.1f %25.1f %14.1f %16.1f  %s\n", static_cast<unsigned long long>(mib),
                gib / memcpy_s, gib / batched_s, gib / chunked_s, gib / coalesced_s,
                agree ? "yes" : "NO");
    if (!agree) rc = 1;
  }
  return rc;
}
