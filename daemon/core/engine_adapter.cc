#include "daemon/core/engine_adapter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/core/fan_out.h"

namespace wsync {
namespace {

absl::Status NotOnThisPath(const EngineAdapter& adapter, absl::string_view hook) {
  return absl::UnimplementedError(absl::StrCat("engine ", adapter.endpoint().url, ": ", hook,
                                               " is not supported by this engine's adapter"));
}

}  // namespace

absl::string_view RendezvousModeName(RendezvousMode mode) {
  switch (mode) {
    case RendezvousMode::kTorchStore:
      return "torch-store";
    case RendezvousMode::kUniqueIdInInit:
      return "unique-id-in-init";
    case RendezvousMode::kStatelessStore:
      return "stateless-store";
  }
  return "unknown";
}

absl::string_view DataPathName(DataPath path) {
  switch (path) {
    case DataPath::kBroadcast:
      return "broadcast";
    case DataPath::kCudaIpc:
      return "cuda-ipc";
    case DataPath::kCudaIpcStream:
      return "cuda-ipc-stream";
  }
  return "unknown";
}

bool AdapterCapabilities::Supports(DataPath path) const {
  return std::find(data_paths.begin(), data_paths.end(), path) != data_paths.end();
}

bool AdapterCapabilities::Supports(RendezvousMode mode) const {
  return std::find(rendezvous.begin(), rendezvous.end(), mode) != rendezvous.end();
}

absl::Status EngineAdapter::InitBroadcastGroup(const Rendezvous&) {
  return NotOnThisPath(*this, "joining a broadcast group");
}

absl::Status EngineAdapter::DestroyBroadcastGroup(const std::string&) {
  return NotOnThisPath(*this, "leaving a broadcast group");
}

absl::StatusOr<EngineRequest> EngineAdapter::IpcBucketRequest(const BucketManifest&,
                                                              const std::vector<IpcBucketView>&,
                                                              const BucketContext&) const {
  return NotOnThisPath(*this, "an IPC bucket request");
}

absl::StatusOr<EngineRequest> EngineAdapter::IpcStreamRequest(
    const UpdateInfo&, const std::vector<IpcStreamRank>&) const {
  return NotOnThisPath(*this, "an IPC stream request");
}

absl::StatusOr<EngineRequest> EngineAdapter::BroadcastBucketRequest(const BucketManifest&,
                                                                    const std::string&,
                                                                    const BucketContext&) const {
  return NotOnThisPath(*this, "a broadcast bucket request");
}

absl::StatusOr<std::vector<BroadcastPiece>> EngineAdapter::BroadcastPieces(
    const BucketManifest&) const {
  return NotOnThisPath(*this, "broadcast pieces");
}

std::vector<absl::Status> OnEachEngine(const std::vector<EngineAdapter*>& adapters,
                                       const std::function<absl::Status(EngineAdapter&)>& fn) {
  return FanOut(adapters.size(), [&](size_t i) { return fn(*adapters[i]); });
}

absl::Status FirstError(const std::vector<absl::Status>& results) {
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace wsync
