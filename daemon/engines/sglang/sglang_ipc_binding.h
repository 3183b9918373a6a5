#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_BINDING_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_BINDING_H_

#include <vector>

#include "daemon/engines/sglang/sglang_path.h"
#include "daemon/transport/ipc/ipc_binding.h"

namespace wsync {

// SGLang's colocated receive by handle (ipc_route "tensor"): every bucket is one POST
// /update_weights_from_tensor whose serialized_named_tensors name, per TP rank, wsyncd's slot on
// that rank's GPU (sglang_ipc_payload.h); the payload follows the server's version.
class SglangIpcBinding final : public IpcBinding, public SglangIpcPath {
 public:
  explicit SglangIpcBinding(SglangAdapter& adapter) : SglangIpcPath(adapter) {}

  absl::StatusOr<EngineRequest> BucketRequest(const BucketManifest& manifest,
                                              const std::vector<IpcBucketView>& ranks,
                                              const BucketContext& context) const override;

  const char* bucket_path() const override { return "/update_weights_from_tensor"; }
  absl::Status ValidateBucket(const BucketManifest& manifest) const override;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_IPC_BINDING_H_
