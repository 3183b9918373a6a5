#include "common/cuda/cuda_platform.h"

#include <cuda_runtime_api.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cuda/cuda_devices.h"
#include "common/cuda/cuda_resident.h"
#include "common/cuda/cuda_slot.h"
#include "common/cuda/cuda_source.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/nccl_communicator.h"
#include "common/cuda/nccl_library.h"
#include "common/cuda/nccl_peer_communicator.h"
#include "common/status_macros.h"

namespace wsync::cuda {
namespace {

// 8-4-4-4-12 lower-case hex, as torch prints a device's uuid.
std::string FormatUuid(const cudaUUID_t& uuid) {
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppend(&out, absl::Hex(static_cast<uint8_t>(uuid.bytes[i]), absl::kZeroPad2));
  }
  return out;
}

class CudaPlatform final : public Platform {
 public:
  explicit CudaPlatform(std::unique_ptr<NcclLibraries> nccl) : nccl_(std::move(nccl)) {}
  absl::string_view name() const override { return "cuda"; }
  absl::StatusOr<std::unique_ptr<SlotMemory>> AllocateSlot(int device, uint64_t bytes) override {
    WSYNC_ASSIGN_OR_RETURN(auto slot, CudaSlot::Create(device, bytes));
    return std::unique_ptr<SlotMemory>(std::move(slot));
  }
  absl::StatusOr<std::vector<std::unique_ptr<SlotMemory>>> AllocateSlots(int device, uint32_t count,
                                                                         uint64_t bytes) override {
    WSYNC_ASSIGN_OR_RETURN(auto slots, CudaSlot::CreateRegions(device, count, bytes));
    std::vector<std::unique_ptr<SlotMemory>> out;
    for (auto& slot : slots) out.push_back(std::move(slot));
    return out;
  }
  absl::StatusOr<std::unique_ptr<RootCommunicator>> CreateRootCommunicator(
      int device, int world_size, const std::string& nccl_library) override {
    WSYNC_ASSIGN_OR_RETURN(const NcclLibrary* nccl, nccl_->Get(nccl_library));
    WSYNC_ASSIGN_OR_RETURN(auto comm, NcclRootCommunicator::Create(nccl, device, world_size));
    return std::unique_ptr<RootCommunicator>(std::move(comm));
  }
  absl::StatusOr<std::unique_ptr<PeerCommunicator>> JoinCommunicator(
      int device, const std::string& unique_id, int rank, int world_size,
      const std::string& nccl_library, absl::Time deadline) override {
    WSYNC_ASSIGN_OR_RETURN(const NcclLibrary* nccl, nccl_->Get(nccl_library));
    WSYNC_ASSIGN_OR_RETURN(
        auto comm, NcclPeerCommunicator::Join(nccl, device, unique_id, rank, world_size, deadline));
    return std::unique_ptr<PeerCommunicator>(std::move(comm));
  }
  absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(int device,
                                                                   ResidentMedium medium,
                                                                   uint64_t bytes) override {
    WSYNC_ASSIGN_OR_RETURN(auto resident, CudaResident::Create(device, medium, bytes));
    return std::unique_ptr<ResidentMemory>(std::move(resident));
  }
  // A CUDA IPC handle is the exporting process's to give: the session tag names nothing here.
  absl::StatusOr<std::unique_ptr<SourceMemory>> MapSource(int device, const std::string& handle,
                                                          uint64_t bytes,
                                                          const std::string& session_tag) override {
    WSYNC_ASSIGN_OR_RETURN(auto source, CudaSource::Open(device, handle, bytes));
    return std::unique_ptr<SourceMemory>(std::move(source));
  }
  absl::StatusOr<std::vector<std::string>> DeviceUuids() const override {
    int count = 0;
    WSYNC_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
    std::vector<std::string> uuids;
    for (int d = 0; d < count; ++d) {
      cudaDeviceProp prop;
      WSYNC_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, d));
      uuids.push_back(FormatUuid(prop.uuid));
    }
    return uuids;
  }
  absl::Status CheckDevices() const override {
    int count = 0;
    WSYNC_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
    for (int d = 0; d < count; ++d) {
      size_t free_bytes = 0, total_bytes = 0;
      cudaError_t set = cudaSetDevice(d);
      cudaError_t info = set == cudaSuccess ? cudaMemGetInfo(&free_bytes, &total_bytes) : set;
      if (info != cudaSuccess) {
        return absl::UnavailableError(absl::StrCat("GPU ", d,
                                                   " does not answer: ", cudaGetErrorName(info),
                                                   ": ", cudaGetErrorString(info)));
      }
    }
    return absl::OkStatus();
  }
  std::vector<std::pair<std::string, std::string>> LoadedNcclLibraries() const override {
    return nccl_->List();
  }
  std::string DefaultNcclVersion() const override {
    return nccl_->default_library().version_string();
  }

 private:
  std::unique_ptr<NcclLibraries> nccl_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Platform>> CreateCudaPlatform(const CudaPlatformOptions& options,
                                                             std::string* description) {
  cuda::DeviceCount count;
  count.error = cudaGetDeviceCount(&count.devices);
  count.error_text = cudaGetErrorString(count.error);
  cudaRuntimeGetVersion(&count.runtime_version);
  cudaDriverGetVersion(&count.driver_version);
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    count.visible_devices = visible;
  }
  WSYNC_RETURN_IF_ERROR(cuda::UsableDevices(count));
  WSYNC_ASSIGN_OR_RETURN(auto nccl, NcclLibraries::Create(options.nccl_library));
  const int devices = count.devices, runtime = count.runtime_version, driver = count.driver_version;
  *description = absl::StrCat(devices, " CUDA device(s), runtime ", runtime, ", driver ", driver,
                              ", NCCL ", nccl->default_library().version_string(), " from ",
                              nccl->default_library().path());
  return std::unique_ptr<Platform>(new CudaPlatform(std::move(nccl)));
}

std::unique_ptr<SourceExporter> CreateCudaSourceExporter(int device) {
  return std::make_unique<CudaSourceExporter>(device);
}

absl::StatusOr<std::shared_ptr<MappedAllocation>> MapCudaAllocation(
    int device, const std::string& memory_handle, uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(auto mapping, CudaMappedAllocation::Open(device, memory_handle, bytes));
  return std::shared_ptr<MappedAllocation>(std::move(mapping));
}

absl::StatusOr<std::unique_ptr<MappedSlot>> MapCudaSlot(
    int device, std::shared_ptr<MappedAllocation> allocation, uint64_t offset, uint64_t bytes,
    const std::string& event_handle) {
  WSYNC_ASSIGN_OR_RETURN(
      auto slot, CudaMappedSlot::Open(device, std::move(allocation), offset, bytes, event_handle));
  return std::unique_ptr<MappedSlot>(std::move(slot));
}

}  // namespace wsync::cuda
