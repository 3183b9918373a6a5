#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_ADAPTER_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_ADAPTER_H_

#include <mutex>

#include "daemon/core/engine_adapter.h"
#include "daemon/engines/http_json.h"
#include "daemon/engines/sglang/sglang_options.h"
#include "nlohmann/json.hpp"

namespace wsync {

// SGLang's disaggregated weight-update API (shared/docs/engine-protocols.md section 3): ranks are
// rank_offset + tp_rank; a bucket goes as load_format "flattened_bucket" (one uint8 broadcast of
// the tensors' bytes back to back in `names` order) or null (one broadcast per tensor, typed); the
// version is recorded at commit. Its engines join through torch's TCPStore.
class SglangAdapter final : public EngineAdapter {
 public:
  // `transport` is the group's: it decides which route the bucket requests go to, and so which
  // route an error names.
  SglangAdapter(EngineEndpoint endpoint, AdapterTimeouts timeouts, SglangOptions options,
                TransportKind transport = TransportKind::kBroadcast)
      : endpoint_(std::move(endpoint)),
        timeouts_(timeouts),
        format_(options.load_format()),
        memory_(options.memory()),
        bucket_path_(transport == TransportKind::kIpc ? "/update_weights_from_tensor"
                                                      : "/update_weights_from_distributed"),
        http_(endpoint_.url) {}

  const EngineEndpoint& endpoint() const override { return endpoint_; }
  AdapterCapabilities Capabilities() const override;
  absl::Status Probe() override;
  EngineHealth Health() override;
  absl::Status ValidateBucket(const BucketManifest& manifest) const override;
  absl::Status PauseGeneration() override;
  // With memory "resume": the weights' memory, before the first bucket.
  absl::Status BeginUpdate(const UpdateInfo& update) override;
  // With memory "resume", the KV cache first if this update resumed the weights.
  absl::Status ResumeGeneration() override;
  absl::Status FinishUpdate(const UpdateInfo& update) override;
  absl::Status CheckBucketReply(const HttpReply& reply) const override;

  absl::Status InitBroadcastGroup(const Rendezvous& rendezvous) override;
  absl::Status DestroyBroadcastGroup(const std::string& group_name) override;
  absl::StatusOr<EngineRequest> BroadcastBucketRequest(const BucketManifest& manifest,
                                                       const std::string& group_name,
                                                       const BucketContext& context) const override;
  absl::StatusOr<std::vector<BroadcastPiece>> BroadcastPieces(
      const BucketManifest& manifest) const override;
  absl::StatusOr<EngineRequest> IpcBucketRequest(const BucketManifest& manifest,
                                                 const std::vector<IpcBucketView>& ranks,
                                                 const BucketContext& context) const override;

  // The request bodies, exposed for tests that pin them to SGLang's schema.
  static nlohmann::json InitGroupBody(const Rendezvous& rendezvous, uint32_t rank_offset);
  static nlohmann::json BucketBody(const BucketManifest& manifest, const std::string& group_name,
                                   BucketFormat format);
  // What Probe requires of the engine's /get_server_info answer (a JSON object).
  static absl::Status CheckServerInfo(const nlohmann::json& info, const EngineEndpoint& endpoint);

 private:
  EngineEndpoint endpoint_;
  AdapterTimeouts timeouts_;
  // Resumes the KV cache if this update resumed the weights and it is still released.
  absl::Status ResumeKvCache();

  BucketFormat format_;
  SglangMemory memory_;
  const char* bucket_path_;
  EngineHttp http_;
  std::mutex mu_;
  bool kv_cache_released_ = false;  // weights resumed by BeginUpdate, KV cache not yet
  // Resuming the weights failed, so they may still be released: the resume that follows is
  // refused.
  bool weights_unknown_ = false;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_ADAPTER_H_
