#ifndef WSYNC_DAEMON_ENGINES_VLLM_VLLM_ADAPTER_H_
#define WSYNC_DAEMON_ENGINES_VLLM_VLLM_ADAPTER_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/engine_adapter.h"
#include "daemon/engines/http_json.h"
#include "daemon/engines/vllm/vllm_options.h"
#include "daemon/engines/vllm/vllm_path.h"
#include "daemon/engines/vllm/vllm_version.h"

namespace wsync {

class VllmNcclBinding;
class VllmIpcBinding;

// vLLM's native weight transfer (docs/engines/vllm.md), on either backend, one binding per data
// path (vllm_ipc_binding.h, vllm_nccl_binding.h), as the group's transport picks:
//  ipc        every bucket is one POST /update_weights whose ipc_handles_pickled names wsyncd's
//             slot on each TP rank's GPU (vllm_ipc_payload.h).
//  broadcast  wsyncd is rank 0 of the workers' NCCL group; every bucket is one POST
//             /update_weights naming its tensors while wsyncd broadcasts them, one per tensor or
//             in packed chunks (vllm_nccl_payload.h).
//
// Probe (each time the group forms): GET /version picks the variant (vllm_version.h); a server
// older than the backend's minimum, or too old for an option asked for (packed IPC, the unique-id
// rendezvous), is FAILED_PRECONDITION naming both versions. IPC: then POST
// /init_weight_transfer_engine {"init_info": {}}, which the IPC backend accepts as a no-op; a 404
// there means the server lacks VLLM_SERVER_DEV_MODE=1. Broadcast: GET /get_world_size
// ?include_dp=true must equal the engine's ranks in the group (vLLM numbers its workers
// rank_offset + dp_index * TP * PP + rank, so the group's count must be all of them).
//
// Broadcast group init (VllmNcclBinding::InitGroup): POST /init_weight_transfer_engine with the
// rendezvous (the base64 unique id, or the store's address) answers only after every worker ran
// ncclCommInitRank and the one-element all-reduce with rank 0, which the transport joins
// meanwhile. vLLM has no route that tears the group down: a new init replaces it.
//
// An update:
//   PauseGeneration  GET /is_sleeping, never an update into a sleeping engine (its EngineCore
//                    crashes, #57853): refused unless wake_weights; then POST /pause?mode=...
//   BeginUpdate      POST /wake_up?tags=weights    (only when it slept and wake_weights)
//                    POST /start_weight_update     (session builds; no body, as vLLM's client)
//   buckets          POST /update_weights ...
//   FinishUpdate     POST /finish_weight_update    ({"weight_version": v} where read)
//                    POST /reset_prefix_cache       (option; the KV came from the old weights)
//                    POST /wake_up?tags=kv_cache    (only after waking the weights)
//                    POST /resume
//   ResumeGeneration (a failed or aborted update, wsyncctl resume-engine): finishes an open
//                    session best-effort, wakes the KV cache it woke the weights for, /resume.
//
// Failures mid-update. vLLM keeps a session open until /finish_weight_update, refuses a second
// start while one is open, and one variant answers 409 to any call out of order; a bucket
// that failed may have left some tensors loaded. Such an update cannot be continued or retried
// bucket by bucket: the trainer must push the whole version again. So a failed bucket, a 409
// anywhere and a failed start or finish are ABORTED, the code absl documents for "retry at a
// higher level (restart the read-modify-write sequence)", unlike UNAVAILABLE (retry the same
// call) or FAILED_PRECONDITION (fix the system first): the message says to re-push the version.
// The session is closed best-effort first (ResumeGeneration, or at once for a 409 at start), so
// the next update's start is not refused. A bucket refused for want of
// VLLM_ALLOW_INSECURE_SERIALIZATION=1 is a configuration error instead (FAILED_PRECONDITION):
// re-pushing would not help. No error carries the engine's words (they go to the debug log).
//
// Bucket rules: none. On the NCCL path every request is chunked from its own first tensor, so
// the '>' chunk cut is made per bucket by the NCCL binding's Pieces, whatever the bucket's size.
// vLLM's IPC consumer rebuilds each tensor from the names/shapes/dtypes it is sent (a dtype per
// tensor, so buckets may mix them), and the packed consumer clones every tensor and reads the chunk
// boundaries from tensor_sizes, so wsyncd's slot-sized buckets are valid chunks as they come; the
// NCCL path's close-after ('>') rule is that path's alone.
class VllmAdapter final : public EngineAdapter {
 public:
  // `data_path`, when given, is used at once (UseDataPath), as a group would.
  VllmAdapter(EngineEndpoint endpoint, AdapterTimeouts timeouts, VllmOptions options,
              absl::string_view data_path = "");
  ~VllmAdapter() override;

  const EngineEndpoint& endpoint() const override { return endpoint_; }
  void SetRankOffset(uint32_t rank_offset) override { endpoint_.rank_offset = rank_offset; }
  AdapterCapabilities Capabilities() const override;
  absl::Status Probe() override;
  EngineHealth Health() override;
  absl::Status ValidateBucket(const BucketManifest& manifest) const override;
  absl::Status PauseGeneration() override;
  absl::Status ResumeGeneration() override;
  void AbandonUpdate() override { FinishBestEffort("the update did not commit"); }
  absl::Status BeginUpdate(const UpdateInfo& update) override;
  absl::Status FinishUpdate(const UpdateInfo& update) override;
  absl::Status CheckBucketReply(const HttpReply& reply) const override;
  std::string probed_version() const override;
  std::string ManualResumeHint() const override { return "POST /resume"; }
  // POST /weight_checker {"action": "checksum"} (409 while paused or asleep, so after resume);
  // UNIMPLEMENTED where the build has none (404).
  absl::StatusOr<WeightChecksums> ChecksumWeights() override;

  DataPathBinding* Binding(absl::string_view data_path) override;
  absl::Status UseDataPath(absl::string_view data_path) override;

  // The variant the last successful Probe picked; nullopt before one.
  std::optional<VllmVariant> variant() const;

  // Reads an answer to GET /version: the variant for the backend, or FAILED_PRECONDITION
  // naming the version and the minimum for the backend or for an option `options` asks for.
  // Exposed for tests.
  static absl::StatusOr<std::pair<VllmVersion, VllmVariant>> CheckVersion(
      const nlohmann::json& answer, const std::string& url, const VllmOptions& options,
      VllmBackend backend);

 private:
  friend class VllmNcclBinding;
  friend class VllmIpcBinding;

  // How the server must be started for the used path's backend.
  const char* ServerFlags() const;
  // Where the server lists its routes (GET /openapi.json), refuses one that lacks a route every
  // update of `variant` calls, naming it and `version`, before any byte is sent.
  absl::Status CheckRoutes(const VllmVersion& version, const VllmVariant& variant) const;
  // The used path's backend; IPC before one is picked.
  VllmBackend backend() const;
  // POST /init_weight_transfer_engine; a 404 is named as a server without the dev routes.
  absl::Status PostInit(const nlohmann::json& body) const;
  // GET /is_sleeping's flag.
  absl::StatusOr<bool> IsSleeping() const;
  // POST /finish_weight_update as the variant wants it; ABORTED on a 409.
  absl::Status PostFinish(const UpdateInfo& update, const VllmVariant& variant);
  // Closes an open session without caring whether it worked (after a failure).
  void FinishBestEffort(const char* why);

  EngineEndpoint endpoint_;
  AdapterTimeouts timeouts_;
  VllmOptions options_;
  EngineHttp http_;
  std::unique_ptr<VllmNcclBinding> nccl_;
  std::unique_ptr<VllmIpcBinding> ipc_;
  VllmPath* path_ = nullptr;  // the used binding's vLLM side; set by UseDataPath
  mutable std::mutex mu_;
  std::optional<VllmVariant> variant_;
  std::string version_text_;
  bool asleep_at_pause_ = false;  // GET /is_sleeping said so before this update's pause
  bool woke_weights_ = false;     // this update woke `weights`; `kv_cache` is owed
  bool session_open_ = false;     // /start_weight_update answered and no finish yet
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_VLLM_VLLM_ADAPTER_H_
