// Why wsyncd --mode=cuda finds no GPU, from what CUDA said: each cause named as itself. Pure: no
// GPU or driver needed.

#include "common/cuda/cuda_devices.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync::cuda {
namespace {

using ::testing::HasSubstr;

DeviceCount Count(cudaError_t error, const char* text, int devices, int driver, int runtime,
                  const char* visible = "") {
  return DeviceCount{error, text, devices, driver, runtime, visible};
}

TEST(CudaDevicesTest, VersionsReadAsMajorDotMinor) {
  EXPECT_EQ(CudaVersionText(13000), "13.0");
  EXPECT_EQ(CudaVersionText(12020), "12.2");
  EXPECT_EQ(CudaVersionText(11080), "11.8");
}

TEST(CudaDevicesTest, ADriverTooOldForTheRuntimeIsNamedWithBothVersions) {
  absl::Status s = UsableDevices(
      Count(cudaErrorInsufficientDriver,
            "CUDA driver version is insufficient for CUDA runtime version", 0, 12020, 13000));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("the NVIDIA driver is too old for this wsyncd: it supports "
                                     "CUDA up to 12.2 (driver API version 12020)"));
  EXPECT_THAT(s.message(), HasSubstr("built with the CUDA 13.0 runtime (13000)"));
  EXPECT_THAT(s.message(), HasSubstr("update the driver"));
  EXPECT_THAT(s.message(), HasSubstr("no newer than 12.2"));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("no CUDA device is visible")));
}

TEST(CudaDevicesTest, NoDriverAtAllIsNotCalledTooOld) {
  // CUDA answers a machine without libcuda.so.1 with the same error as a driver too old.
  absl::Status s = UsableDevices(
      Count(cudaErrorInsufficientDriver,
            "CUDA driver version is insufficient for CUDA runtime version", 0, 0, 13000));
  EXPECT_THAT(s.message(), HasSubstr("no NVIDIA driver was found (libcuda.so.1 cannot be loaded"));
  EXPECT_THAT(s.message(), HasSubstr("--mode=host"));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("too old")));
}

TEST(CudaDevicesTest, NoVisibleDeviceNamesCudaVisibleDevices) {
  absl::Status s = UsableDevices(
      Count(cudaErrorNoDevice, "no CUDA-capable device is detected", 0, 13000, 13000, "GPU-none"));
  EXPECT_THAT(s.message(), HasSubstr("no CUDA device is visible"));
  EXPECT_THAT(s.message(), HasSubstr("CUDA_VISIBLE_DEVICES is 'GPU-none'"));
  EXPECT_THAT(UsableDevices(Count(cudaSuccess, "no error", 0, 13000, 13000)).message(),
              HasSubstr("no CUDA device is visible"));
}

TEST(CudaDevicesTest, AKernelModuleOfAnotherVersionThanItsLibraryIsNamed) {
  absl::Status s = UsableDevices(Count(cudaErrorSystemDriverMismatch,
                                       "system has unsupported display driver / cuda driver "
                                       "combination",
                                       0, 13000, 13000));
  EXPECT_THAT(s.message(), HasSubstr("kernel module and its user-space library"));
  EXPECT_THAT(s.message(), HasSubstr("reboot after a driver upgrade"));
}

TEST(CudaDevicesTest, AnyOtherErrorIsPassedOnWithTheVersions) {
  absl::Status s =
      UsableDevices(Count(cudaErrorOperatingSystem, "OS call failed", 0, 13000, 13000));
  EXPECT_THAT(s.message(), HasSubstr("CUDA could not list the GPUs: OS call failed (driver for "
                                     "CUDA 13.0, runtime 13.0)"));
  EXPECT_TRUE(UsableDevices(Count(cudaSuccess, "no error", 2, 13000, 13000)).ok());
}

}  // namespace
}  // namespace wsync::cuda
