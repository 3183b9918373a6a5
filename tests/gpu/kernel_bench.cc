// Bandwidth of the kernels on the sending GPU's critical path (the trainer's bucket copy and the
// checksums on both sides), nccl-tests style, against cudaMemcpy as the reference. Each line
// checks that the fused copy+checksum and every checksum chunk size agree.
//
// A second table: the sparse-delta encoder (docs/DELTA.md) on a bf16 bucket of 339 tensors with
// 0.1 %, 1 % and 10 % of its elements changed at random, and 100 % under the relay's limit (the
// span: the encoder only counts, and the bucket goes dense). Its rate counts the bytes it reads
// (both versions) and writes (the frame), against a device-to-device copy's (reads and writes)
// in the same run; every frame is checked against the CPU codec's. Then the decoder as a
// downstream calls it, the base with the frame applied into other memory (counting the base
// read, the output written and the frame read), the result compared with the new version.
// Gates: each >= 0.5 x the copy's rate (exit 1 when missed).
//
//   kernel_bench [--device 0] [--sizes 128,256,1024,4096 (MiB)] [--delta-sizes 256,1024]
//                [--reps 5]

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda/cuda_resources.h"
#include "common/cuda/delta_decoder.h"
#include "common/cuda/delta_encoder.h"
#include "common/cuda/kernels.h"
#include "common/delta/bucket_delta.h"

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

// The delta table; false when a frame disagrees with the CPU codec's or a gate is missed.
bool DeltaTable(int device, int reps, const std::vector<uint64_t>& sizes_mib, cudaStream_t s) {
  auto encoder = wsync::cuda::DeltaEncoder::Create(device);
  auto decoder = wsync::cuda::DeltaDecoder::Create(device);
  if (!encoder.ok() || !decoder.ok()) {
    std::fprintf(stderr, "kernel_bench: no delta encoder or decoder\n");
    return false;
  }
  std::printf(
      "# delta encoder, bf16 bucket of 339 tensors; GiB/s of bytes read and written, "
      "ratio to the d2d copy's\n");
  std::printf(
      "#   size(MiB)   changed  frame/dense  d2d-copy    encode   ratio  gate  agree  "
      "counted-ms  sized-ms  written-ms  compare-ms    decode   ratio  gate  agree\n");
  bool ok = true;
  for (uint64_t mib : sizes_mib) {
    const uint64_t bytes = mib << 20;
    wsync::BucketManifest m;
    const uint64_t piece = bytes / 339 / 256 * 256;
    for (uint64_t off = 0, i = 0; off < bytes; off += piece, ++i) {
      const uint64_t len = std::min(piece, bytes - off);
      m.tensors.push_back(wsync::TensorEntry{"t" + std::to_string(i),
                                             wsync::DType::kBfloat16,
                                             {static_cast<int64_t>(len / 2)},
                                             off,
                                             len});
    }
    std::vector<uint8_t> base(bytes);
    uint64_t x = 88172645463325252ull;
    for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      std::memcpy(&base[i], &x, 8);
    }
    void *d_base = nullptr, *d_next = nullptr, *d_frame = nullptr, *d_copy = nullptr;
    if (cudaMalloc(&d_base, bytes) != cudaSuccess || cudaMalloc(&d_next, bytes) != cudaSuccess ||
        cudaMalloc(&d_frame, bytes + (1 << 20)) != cudaSuccess ||
        cudaMalloc(&d_copy, bytes) != cudaSuccess) {
      std::fprintf(stderr, "kernel_bench: allocation of %llu MiB failed\n",
                   static_cast<unsigned long long>(mib));
      return false;
    }
    cudaMemcpy(d_base, base.data(), bytes, cudaMemcpyHostToDevice);
    const double copy_s = BestSeconds(reps, [&] {
      return cudaMemcpyAsync(d_copy, d_base, bytes, cudaMemcpyDeviceToDevice, s) == cudaSuccess &&
             cudaStreamSynchronize(s) == cudaSuccess;
    });
    const double copy_rate = gib(2 * bytes) / copy_s;
    for (double fraction : {0.001, 0.01, 0.1, 1.0}) {
      std::vector<uint8_t> next = base;
      const auto elements = bytes / 2;
      const auto k = static_cast<uint64_t>(fraction * static_cast<double>(elements));
      for (uint64_t j = 0; j < k; ++j) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const uint64_t e = fraction >= 1.0 ? j : x % elements;
        next[2 * e + (x >> 63)] ^= 0x40;
      }
      cudaMemcpy(d_next, next.data(), bytes, cudaMemcpyHostToDevice);
      // The relay's call: a frame no smaller than the span is not written.
      uint64_t frame = 0;
      const double encode_s = BestSeconds(reps, [&] {
        auto f =
            (*encoder)->Encode(m, d_base, d_next, d_frame, bytes + (1 << 20), s, nullptr, bytes);
        frame = f.ok() ? *f : 0;
        return f.ok() || absl::IsResourceExhausted(f.status());
      });
      bool agree = encode_s > 0;
      if (frame > 0) {
        absl::StatusOr<std::string> cpu = wsync::EncodeBucketDelta(m, base, next);
        std::string gpu(frame, '\0');
        cudaMemcpy(gpu.data(), d_frame, frame, cudaMemcpyDeviceToHost);
        agree = agree && cpu.ok() && *cpu == gpu;
      }
      const double rate = gib(2 * bytes + frame) / encode_s;
      const bool gate = rate >= 0.5 * copy_rate;
      ok = ok && agree && gate;
      const wsync::cuda::DeltaEncoder::Phases p = (*encoder)->last_phases();
      std::printf("%13llu %8.1f%% %11.2f%% %9.1f %9.1f %7.2f  %s  %s  %10.3f %9.3f %11.3f %11.3f",
                  static_cast<unsigned long long>(mib), 100 * fraction,
                  100.0 * static_cast<double>(frame) / static_cast<double>(bytes), copy_rate, rate,
                  rate / copy_rate, gate ? "PASS" : "FAIL", agree ? "yes" : "NO", 1e3 * p.counted,
                  1e3 * p.sized, 1e3 * p.written, 1e3 * p.compare_kernel);
      if (frame == 0) {
        std::printf("         -       -     -      -\n");
        continue;
      }
      // The downstream's call: the base (its resident copy) with the frame applied, into a slot.
      const double decode_s = BestSeconds(
          reps, [&] { return (*decoder)->Decode(m, d_base, d_frame, frame, d_copy, s).ok(); });
      std::vector<uint8_t> rebuilt(bytes);
      cudaMemcpy(rebuilt.data(), d_copy, bytes, cudaMemcpyDeviceToHost);
      const bool rebuilt_ok = decode_s > 0 && rebuilt == next;
      const double decode_rate = gib(2 * bytes + frame) / decode_s;
      const bool decode_gate = decode_rate >= 0.5 * copy_rate;
      ok = ok && rebuilt_ok && decode_gate;
      std::printf(" %9.1f %7.2f  %s  %s\n", decode_rate, decode_rate / copy_rate,
                  decode_gate ? "PASS" : "FAIL", rebuilt_ok ? "yes" : "NO");
    }
    cudaFree(d_base);
    cudaFree(d_next);
    cudaFree(d_frame);
    cudaFree(d_copy);
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int device = 0, reps = 5;
  std::vector<uint64_t> sizes_mib = {128, 256, 1024, 4096};
  std::vector<uint64_t> delta_mib = {256, 1024};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--device") device = std::atoi(argv[i + 1]);
    if (flag == "--reps") reps = std::atoi(argv[i + 1]);
    if (flag == "--sizes" || flag == "--delta-sizes") {
      std::vector<uint64_t>& list = flag == "--sizes" ? sizes_mib : delta_mib;
      list.clear();
      for (char* tok = std::strtok(argv[i + 1], ","); tok; tok = std::strtok(nullptr, ",")) {
        list.push_back(std::strtoull(tok, nullptr, 10));
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
  if (!delta_mib.empty() && !DeltaTable(device, reps, delta_mib, s)) rc = 1;
  return rc;
}
