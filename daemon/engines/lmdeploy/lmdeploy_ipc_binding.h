#ifndef WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_BINDING_H_
#define WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_BINDING_H_

#include <vector>

#include "daemon/engines/lmdeploy/lmdeploy_path.h"
#include "daemon/transport/ipc/ipc_binding.h"

namespace wsync {

class LmdeployAdapter;

// LMDeploy's colocated receive: every bucket is one POST /update_weights naming wsyncd's slot
// over CUDA IPC (lmdeploy_ipc_payload.h), the flattened tensor sent only where a rank's worker
// does not hold it already (lmdeploy_adapter.h says when). /update_weights answers `null` with
// HTTP 200; an exception in the engine is a 500. A 400 that refuses pickled tensors (PR #4964,
// pending upstream) is a configuration error naming LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS=1, never
// retried.
class LmdeployIpcBinding final : public IpcBinding, public LmdeployPath {
 public:
  explicit LmdeployIpcBinding(LmdeployAdapter& adapter) : adapter_(adapter) {}

  absl::StatusOr<EngineRequest> BucketRequest(const BucketManifest& manifest,
                                              const std::vector<IpcBucketView>& ranks,
                                              const BucketContext& context) const override;

  absl::Status CheckRoutes(bool update_group) const override { return absl::OkStatus(); }
  void AddHealth(bool update_group, EngineHealth* health) const override;
  absl::Status ValidateBucket(const BucketManifest& manifest) const override;
  // A request that failed may have failed before or after the worker cached its tensor: the
  // cache is forgotten.
  absl::Status CheckBucketReply(const HttpReply& reply) const override;
  absl::Status FinishOnly() override;

 private:
  absl::Status CheckBucketAnswer(const HttpReply& reply) const;

  LmdeployAdapter& adapter_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_IPC_BINDING_H_
