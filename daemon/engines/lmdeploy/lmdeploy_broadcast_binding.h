#ifndef WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_BROADCAST_BINDING_H_
#define WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_BROADCAST_BINDING_H_

#include <string>
#include <vector>

#include "daemon/engines/lmdeploy/lmdeploy_path.h"
#include "daemon/transport/broadcast/broadcast_binding.h"
#include "nlohmann/json.hpp"

namespace wsync {

class LmdeployAdapter;

// LMDeploy's disaggregated receive (PR #4638): the engine's ranks join wsyncd's collective
// through torch's TCPStore (POST /init_weights_update_group with its required group_name), and
// every bucket is one POST /update_weights_from_distributed whose receive runs while wsyncd
// broadcasts (lmdeploy_nccl_payload.h). Its answers are {success, message}; 501 means a backend
// other than pytorch, which has no such routes, and is a configuration error.
class LmdeployBroadcastBinding final : public BroadcastBinding, public LmdeployPath {
 public:
  explicit LmdeployBroadcastBinding(LmdeployAdapter& adapter) : adapter_(adapter) {}

  std::vector<RendezvousMode> RendezvousModes() const override {
    return {RendezvousMode::kTorchStore};
  }
  absl::Status InitGroup(const Rendezvous& rendezvous) override;
  absl::Status DestroyGroup(const std::string& group_name) override;
  absl::StatusOr<EngineRequest> BucketRequest(const BucketManifest& manifest,
                                              const std::string& group_name,
                                              const BucketContext& context) const override;
  absl::StatusOr<std::vector<BroadcastPiece>> Pieces(const BucketManifest& manifest) const override;

  // A server without the init route is refused a broadcast group.
  absl::Status CheckRoutes(bool update_group) const override;
  void AddHealth(bool update_group, EngineHealth* health) const override;
  // The broadcast's receive is one concatenation: back to back, as the pieces say.
  absl::Status ValidateBucket(const BucketManifest& manifest) const override;
  absl::Status CheckBucketReply(const HttpReply& reply) const override;
  // Names empty: nothing is broadcast, and the finished hooks run.
  absl::Status FinishOnly() override;

 private:
  // {success, message}, with 501 (another backend) named.
  absl::Status PostDistributed(const char* path, const nlohmann::json& body) const;
  // 501 from a disaggregated route: the server's backend is not pytorch.
  absl::Status NotPytorchBackend(const char* path) const;

  LmdeployAdapter& adapter_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_BROADCAST_BINDING_H_
