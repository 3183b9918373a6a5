#ifndef WSYNC_DAEMON_ENGINES_VLLM_VLLM_NCCL_BINDING_H_
#define WSYNC_DAEMON_ENGINES_VLLM_VLLM_NCCL_BINDING_H_

#include <string>
#include <vector>

#include "daemon/engines/vllm/vllm_path.h"
#include "daemon/transport/broadcast/broadcast_binding.h"

namespace wsync {

class VllmAdapter;

// vLLM's NCCL backend: wsyncd is rank 0 of the workers' group, which they join through the
// rendezvous the group's options chose (the base64 unique id in the init request, or a stateless
// store); every bucket is one POST /update_weights naming its tensors while wsyncd broadcasts
// them, one per tensor or in packed chunks (vllm_nccl_payload.h).
class VllmNcclBinding final : public BroadcastBinding, public VllmPath {
 public:
  explicit VllmNcclBinding(VllmAdapter& adapter) : adapter_(adapter) {}

  // One rendezvous, the group's choice: every engine of the group must meet rank 0 alike.
  std::vector<RendezvousMode> RendezvousModes() const override;
  // vLLM has no route that drops its group; the next init replaces it.
  bool LeavesGroup() const override { return false; }
  absl::Status InitGroup(const Rendezvous& rendezvous) override;
  absl::Status DestroyGroup(const std::string& group_name) override;
  absl::StatusOr<EngineRequest> BucketRequest(const BucketManifest& manifest,
                                              const std::string& group_name,
                                              const BucketContext& context) const override;
  absl::StatusOr<std::vector<BroadcastPiece>> Pieces(const BucketManifest& manifest) const override;

  VllmBackend backend() const override { return VllmBackend::kNccl; }
  // GET /get_world_size?include_dp=true must equal the engine's ranks in the group (vLLM
  // numbers its workers rank_offset + dp_index * TP * PP + rank, so the group's count must be
  // all of them).
  absl::Status ProbeServer() override;

 private:
  VllmAdapter& adapter_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_VLLM_VLLM_NCCL_BINDING_H_
