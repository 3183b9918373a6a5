// The IPC transport's registration (daemon/transport/builtin_transport_kinds.inc).
#include <memory>

#include "daemon/core/transport_kind.h"
#include "daemon/transport/ipc/ipc_binding.h"
#include "daemon/transport/ipc/ipc_transport.h"

namespace wsync {
namespace {

class IpcTransportKind final : public TransportKind {
 public:
  absl::string_view name() const override { return "ipc"; }
  std::vector<std::string> data_paths() const override {
    return {std::string(kCudaIpcDataPath), std::string(kCudaIpcStreamDataPath)};
  }
  bool engines_read_in_place() const override { return true; }
  // Measured colocated on one GPU (docs/PERFORMANCE.md): wsyncd's copy, or none where a bucket is
  // read in place, beside the engines' own loads beats a copy in the trainer's process. Not on
  // the stream, which maps one allocation per update: pulled buckets may lie in several.
  bool pull_by_default(absl::string_view data_path) const override {
    return data_path != kCudaIpcStreamDataPath;
  }
  // Colocated: the engines read the slot on the GPU the trainer filled it on, with no wire
  // between; measured in docs/PERFORMANCE.md ("Checksums"), the full CRC-32 cost a 4 GiB bucket
  // more than the sampled check.
  ChecksumKind checksum_by_default() const override { return ChecksumKind::kCrc32Sampled; }
  absl::StatusOr<std::unique_ptr<Transport>> Make(TransportEnv env) const override {
    return std::make_unique<IpcTransport>(std::move(env));
  }
};

}  // namespace

std::unique_ptr<TransportKind> MakeIpcTransportKind() {
  return std::make_unique<IpcTransportKind>();
}

}  // namespace wsync
