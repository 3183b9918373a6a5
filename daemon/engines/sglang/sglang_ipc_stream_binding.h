#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_STREAM_BINDING_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_STREAM_BINDING_H_

#include <vector>

#include "daemon/engines/sglang/sglang_path.h"
#include "daemon/transport/ipc/ipc_binding.h"

namespace wsync {

// SGLang's colocated map-once receive (ipc_route "ipc"): one POST /update_weights_from_ipc
// {zmq_handles: {"GPU-<uuid>": address}, weight_version, flush_cache} opens the update; each TP
// rank then takes the buckets on its own socket. The request is the update's last, so it carries
// the label and the flush (SglangAdapter::LabelRequest).
class SglangIpcStreamBinding final : public IpcStreamBinding, public SglangIpcPath {
 public:
  explicit SglangIpcStreamBinding(SglangAdapter& adapter) : SglangIpcPath(adapter) {}

  absl::StatusOr<EngineRequest> StreamRequest(
      const UpdateInfo& update, const std::vector<IpcStreamRank>& ranks) const override;

  const char* bucket_path() const override { return "/update_weights_from_ipc"; }
  // Each tensor is viewed at its own byte offset as its dtype, so only alignment matters.
  absl::Status ValidateBucket(const BucketManifest& manifest) const override;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_STREAM_BINDING_H_
