// Runs only where a CUDA device exists (the GPU machine); elsewhere every test skips.

#include "common/cuda/cuda_resources.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "common/checksum.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/kernels.h"
#include "gtest/gtest.h"

namespace wsync::cuda {
namespace {

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device on this machine"

TEST(CudaResources, BufferIsExportedOnceAndHoldsWhatIsCopiedIn) {
  SKIP_WITHOUT_GPU();
  auto buffer = DeviceBuffer::Create(0, 1 << 20);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*buffer)->ipc_handle().size(), sizeof(cudaIpcMemHandle_t));
  std::vector<char> in(1 << 20, 7), out(1 << 20, 0);
  ASSERT_EQ(cudaMemcpy((*buffer)->data(), in.data(), in.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out.data(), (*buffer)->data(), out.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size()), 0);
}

TEST(CudaResources, InterprocessEventHasAHandle) {
  SKIP_WITHOUT_GPU();
  auto event = IpcEvent::Create(0);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ((*event)->handle().size(), sizeof(cudaIpcEventHandle_t));
  auto stream = Stream::Create(0);
  ASSERT_TRUE(stream.ok());
  ASSERT_EQ(cudaEventRecord((*event)->get(), (*stream)->get()), cudaSuccess);
  EXPECT_TRUE((*stream)->Synchronize().ok());
}

TEST(CudaKernels, DeviceCrc32EqualsTheHostCrc32) {
  SKIP_WITHOUT_GPU();
  // Sizes around the 4 KiB chunk and 1 MiB block edges, a partial last block with a tail, and a
  // start that is not 16-byte aligned.
  for (uint64_t n : {1ull, 4095ull, 4096ull, 65536ull, 65537ull, 1ull << 20, (1ull << 20) + 4096,
                     (33ull << 20) + 7}) {
    for (uint64_t shift : {0ull, 1ull}) {
      std::vector<uint8_t> host(n);
      for (uint64_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>((i * 2654435761u) >> 7);
      auto buffer = DeviceBuffer::Create(0, n + shift);
      ASSERT_TRUE(buffer.ok());
      char* start = static_cast<char*>((*buffer)->data()) + shift;
      ASSERT_EQ(cudaMemcpy(start, host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
      auto crc = DeviceCrc32(start, n, nullptr);
      ASSERT_TRUE(crc.ok()) << crc.status();
      EXPECT_EQ(*crc, Crc32(host.data(), n)) << n << " bytes at offset " << shift;
      auto coalesced = DeviceCrc32Coalesced(start, n, nullptr);
      ASSERT_TRUE(coalesced.ok()) << coalesced.status();
      EXPECT_EQ(*coalesced, Crc32(host.data(), n)) << n << " bytes at offset " << shift;
    }
  }
}

TEST(CudaKernels, BatchedCopyMovesEveryRangeInOneLaunch) {
  SKIP_WITHOUT_GPU();
  const uint64_t n = 5 << 20;
  std::vector<uint8_t> host(n);
  for (uint64_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>(i * 7 + 3);
  auto src = DeviceBuffer::Create(0, n);
  auto dst = DeviceBuffer::Create(0, n);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_EQ(cudaMemcpy((*src)->data(), host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset((*dst)->data(), 0, n), cudaSuccess);
  auto* s = static_cast<char*>((*src)->data());
  auto* d = static_cast<char*>((*dst)->data());
  // Unaligned, tiny and multi-chunk ranges, placed in reverse order.
  std::vector<CopyItem> items = {{s, d + (3 << 20), (3 << 19) + 9},
                                 {s + (3 << 20), d + 1, 1},
                                 {s + (3 << 20) + 1, d + 2, (1 << 20) + 5}};
  std::vector<uint8_t> scratch_host;
  void* scratch = nullptr;
  size_t capacity = 0;
  ASSERT_TRUE(BatchedCopy(items, nullptr, &scratch_host, &scratch, &capacity).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> out(n);
  ASSERT_EQ(cudaMemcpy(out.data(), d, n, cudaMemcpyDeviceToHost), cudaSuccess);
  for (const auto& it : items) {
    const uint64_t so = static_cast<const char*>(it.src) - s;
    const uint64_t dof = static_cast<char*>(it.dst) - d;
    ASSERT_EQ(std::memcmp(out.data() + dof, host.data() + so, it.bytes), 0) << dof;
  }
  cudaFree(scratch);
}

TEST(CudaStatus, ErrorsCarryTheCallAndCudasText) {
  absl::Status s = WSYNC_CUDA_STATUS(cudaErrorInvalidValue);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("cudaErrorInvalidValue"), absl::string_view::npos);
  EXPECT_NE(s.message().find("cuda_resources_test.cc"), absl::string_view::npos);
}

}  // namespace
}  // namespace wsync::cuda
