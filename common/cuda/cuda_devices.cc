#include "common/cuda/cuda_devices.h"

#include "absl/strings/str_cat.h"

namespace wsync::cuda {
namespace {

constexpr char kNeedsGpu[] =
    "wsyncd --mode=cuda needs a GPU node (use --mode=host only for development)";

}  // namespace

std::string CudaVersionText(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

absl::Status UsableDevices(const DeviceCount& count) {
  if (count.error == cudaSuccess && count.devices > 0) return absl::OkStatus();
  if (count.driver_version == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no NVIDIA driver was found (libcuda.so.1 cannot be loaded; CUDA says: ", count.error_text,
        "); ", kNeedsGpu));
  }
  const std::string driver = CudaVersionText(count.driver_version);
  const std::string runtime = CudaVersionText(count.runtime_version);
  if (count.error == cudaErrorInsufficientDriver) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the NVIDIA driver is too old for this wsyncd: it supports CUDA up to ", driver,
        " (driver API version ", count.driver_version, "), and wsyncd was built with the CUDA ",
        runtime, " runtime (", count.runtime_version, "), which needs a driver for CUDA ", runtime,
        " or newer: update the driver (or install NVIDIA's cuda-compat package for ", runtime,
        "), or build wsync with a CUDA toolkit no newer than ", driver));
  }
  if (count.error == cudaErrorSystemDriverMismatch) {
    return absl::FailedPreconditionError(
        absl::StrCat("the NVIDIA kernel module and its user-space library (libcuda.so.1, for CUDA ",
                     driver, ") are of different driver versions (CUDA says: ", count.error_text,
                     "): reboot after a driver upgrade, or reinstall the driver"));
  }
  const std::string visible =
      count.visible_devices.empty()
          ? ""
          : absl::StrCat("; CUDA_VISIBLE_DEVICES is '", count.visible_devices, "'");
  if (count.error == cudaSuccess || count.error == cudaErrorNoDevice) {
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device is visible (driver for CUDA ",
                                                      driver, ", runtime ", runtime, visible, "); ",
                                                      kNeedsGpu));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("CUDA could not list the GPUs: ", count.error_text, " (driver for CUDA ", driver,
                   ", runtime ", runtime, visible, "); ", kNeedsGpu));
}

}  // namespace wsync::cuda
