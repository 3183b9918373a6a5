#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_BROADCAST_BINDING_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_BROADCAST_BINDING_H_

#include <string>
#include <vector>

#include "daemon/engines/bucket_format.h"
#include "daemon/engines/sglang/sglang_path.h"
#include "daemon/transport/broadcast/broadcast_binding.h"
#include "nlohmann/json.hpp"

namespace wsync {

class SglangAdapter;

// SGLang's disaggregated receive (docs/engines/sglang.md): its ranks join wsyncd's collective
// through torch's TCPStore (POST /init_weights_update_group, ranks rank_offset + tp_rank), and
// every bucket is one POST /update_weights_from_distributed naming its tensors while wsyncd
// broadcasts them, as load_format "flattened_bucket" (one uint8 broadcast of the tensors' bytes
// back to back in `names` order) or null (one typed broadcast per tensor).
class SglangBroadcastBinding final : public BroadcastBinding, public SglangPath {
 public:
  explicit SglangBroadcastBinding(SglangAdapter& adapter) : adapter_(adapter) {}

  std::vector<RendezvousMode> RendezvousModes() const override {
    return {RendezvousMode::kTorchStore};
  }
  absl::Status InitGroup(const Rendezvous& rendezvous) override;
  absl::Status DestroyGroup(const std::string& group_name) override;
  absl::StatusOr<EngineRequest> BucketRequest(const BucketManifest& manifest,
                                              const std::string& group_name,
                                              const BucketContext& context) const override;
  absl::StatusOr<std::vector<BroadcastPiece>> Pieces(const BucketManifest& manifest) const override;

  const char* bucket_path() const override { return "/update_weights_from_distributed"; }
  // Records the version the server reports; the broadcast's payload depends on none.
  absl::Status ProbeServer(const nlohmann::json& info) override;
  void AddHealth(const nlohmann::json& info, EngineHealth* health) const override;
  absl::Status ValidateBucket(const BucketManifest& manifest) const override;

  // The request bodies, exposed for tests that pin them to SGLang's schema.
  static nlohmann::json InitGroupBody(const Rendezvous& rendezvous, uint32_t rank_offset);
  // `selector`: the server has sessions, and the request names what it updates ("all").
  static nlohmann::json BucketBody(const BucketManifest& manifest, const std::string& group_name,
                                   BucketFormat format, bool selector = false);

 private:
  SglangAdapter& adapter_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_BROADCAST_BINDING_H_
