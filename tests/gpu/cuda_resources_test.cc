// Runs only where a CUDA device exists (the GPU machine); elsewhere every test skips.

#include "common/cuda/cuda_resources.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "common/cuda/cuda_status.h"
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

TEST(CudaStatus, ErrorsCarryTheCallAndCudasText) {
  absl::Status s = WSYNC_CUDA_STATUS(cudaErrorInvalidValue);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("cudaErrorInvalidValue"), absl::string_view::npos);
  EXPECT_NE(s.message().find("cuda_resources_test.cc"), absl::string_view::npos);
}

}  // namespace
}  // namespace wsync::cuda
