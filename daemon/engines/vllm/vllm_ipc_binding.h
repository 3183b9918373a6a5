#ifndef WSYNC_DAEMON_ENGINES_VLLM_VLLM_IPC_BINDING_H_
#define WSYNC_DAEMON_ENGINES_VLLM_VLLM_IPC_BINDING_H_

#include <vector>

#include "daemon/engines/vllm/vllm_path.h"
#include "daemon/transport/ipc/ipc_binding.h"

namespace wsync {

class VllmAdapter;

// vLLM's IPC backend: every bucket is one POST /update_weights whose ipc_handles_pickled names
// wsyncd's slot on each TP rank's GPU (vllm_ipc_payload.h).
class VllmIpcBinding final : public IpcBinding, public VllmPath {
 public:
  explicit VllmIpcBinding(VllmAdapter& adapter) : adapter_(adapter) {}

  absl::StatusOr<EngineRequest> BucketRequest(const BucketManifest& manifest,
                                              const std::vector<IpcBucketView>& ranks,
                                              const BucketContext& context) const override;

  VllmBackend backend() const override { return VllmBackend::kIpc; }
  // POST /init_weight_transfer_engine {"init_info": {}}, which the IPC backend accepts as a
  // no-op: a 404 there means the server lacks VLLM_SERVER_DEV_MODE=1.
  absl::Status ProbeServer() override;

 private:
  VllmAdapter& adapter_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_VLLM_VLLM_IPC_BINDING_H_
