#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_ADAPTER_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_ADAPTER_H_

#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "daemon/core/engine_adapter.h"
#include "daemon/engines/http_json.h"
#include "daemon/engines/sglang/sglang_options.h"
#include "daemon/engines/sglang/sglang_sessions.h"
#include "daemon/engines/sglang/sglang_version.h"
#include "nlohmann/json.hpp"

namespace wsync {

// SGLang's disaggregated weight-update API (docs/engines/sglang.md): ranks are
// rank_offset + tp_rank; a bucket goes as load_format "flattened_bucket" (one uint8 broadcast of
// the tensors' bytes back to back in `names` order) or null (one broadcast per tensor, typed); the
// version is recorded at commit. Its engines join through torch's TCPStore.
//
// On the IPC transport (update_weights_from_tensor) Probe also reads the server's version, once
// each time the group forms, and picks the payload from it (sglang_version.h has the table and
// docs/engines/sglang.md the evidence): a server too old for the group's load_format is refused
// naming its version and the minimum. The broadcast path reads no version.
//
// On every transport Probe also asks whether the server has weight-update sessions
// (sglang_sessions.h). Where it has, every update sits inside POST /begin_weight_update
// {"selector": "all"} (after pausing) and /end_weight_update (before the version is recorded, or
// best effort when an update is aborted), and every bucket request says "selector": "all".
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
        route_(options.ipc_route()),
        transport_(transport),
        bucket_path_(transport != TransportKind::kIpc ? "/update_weights_from_distributed"
                     : route_ == SglangIpcRoute::kIpc ? "/update_weights_from_ipc"
                                                      : "/update_weights_from_tensor"),
        http_(endpoint_.url) {}

  const EngineEndpoint& endpoint() const override { return endpoint_; }
  void SetRankOffset(uint32_t rank_offset) override { endpoint_.rank_offset = rank_offset; }
  AdapterCapabilities Capabilities() const override;
  absl::Status Probe() override;
  EngineHealth Health() override;
  absl::Status ValidateBucket(const BucketManifest& manifest) const override;
  absl::Status PauseGeneration() override;
  // With memory "resume": the weights' memory, before the first bucket; then, on a server with
  // sessions, /begin_weight_update.
  absl::Status BeginUpdate(const UpdateInfo& update) override;
  // With memory "resume", the KV cache first if this update resumed the weights.
  absl::Status ResumeGeneration() override;
  void AbandonUpdate() override;
  // With memory "resume", BeginUpdate resumes the weights' memory, whose contents are then
  // whatever the buckets write.
  bool BeginLeavesWeightsUndefined() const override { return memory_ == SglangMemory::kResume; }
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
  // ipc_route "ipc": POST /update_weights_from_ipc {zmq_handles: {"GPU-<uuid>": address},
  // flush_cache: false}; the version is recorded and the cache flushed at commit.
  absl::StatusOr<EngineRequest> IpcStreamRequest(
      const UpdateInfo& update, const std::vector<IpcStreamRank>& ranks) const override;

  // The request bodies, exposed for tests that pin them to SGLang's schema.
  static nlohmann::json InitGroupBody(const Rendezvous& rendezvous, uint32_t rank_offset);
  // `selector`: the server has sessions, and the request names what it updates ("all").
  static nlohmann::json BucketBody(const BucketManifest& manifest, const std::string& group_name,
                                   BucketFormat format, bool selector = false);
  // What Probe requires of the engine's /get_server_info answer (a JSON object).
  static absl::Status CheckServerInfo(const nlohmann::json& info, const EngineEndpoint& endpoint);
  // On the IPC transport: the server's version (the "version" of /get_server_info) and the
  // payload it gets with `format`, or FAILED_PRECONDITION naming the version and the minimum.
  static absl::StatusOr<std::pair<SglangVersion, SglangIpcVariant>> CheckIpcVersion(
      const nlohmann::json& info, const std::string& url, BucketFormat format,
      SglangIpcRoute route = SglangIpcRoute::kTensor);
  // The IPC variant the last successful Probe picked; nullopt before one and on the broadcast.
  std::optional<SglangIpcVariant> ipc_variant() const;
  std::string probed_version() const override;
  std::string ManualResumeHint() const override { return "POST /continue_generation"; }
  // POST /weights_checker {"action": "checksum"}; UNIMPLEMENTED where the build has none (404).
  absl::StatusOr<WeightChecksums> ChecksumWeights() override;

  // Whether the last successful Probe found weight-update sessions.
  bool sessions() const;

 private:
  EngineEndpoint endpoint_;
  AdapterTimeouts timeouts_;
  // Resumes the KV cache if this update resumed the weights and it is still released.
  absl::Status ResumeKvCache();
  // Ends the open session, if any; the session counts as closed only once the server said so.
  absl::Status EndSession();
  // With memory "resume": the weights' memory, before the first bucket.
  absl::Status ResumeWeights();

  BucketFormat format_;
  SglangMemory memory_;
  SglangIpcRoute route_;
  TransportKind transport_;
  const char* bucket_path_;
  EngineHttp http_;
  mutable std::mutex mu_;
  std::optional<SglangIpcVariant> ipc_variant_;  // set by Probe on the IPC transport
  std::string version_text_;                     // the version the last Probe read
  bool kv_cache_released_ = false;               // weights resumed by BeginUpdate, KV cache not yet
  // Resuming the weights failed, so they may still be released: the resume that follows is
  // refused.
  bool weights_unknown_ = false;
  bool sessions_ = false;      // set by Probe
  bool session_open_ = false;  // begun and not yet ended (or its end failed)
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_ADAPTER_H_
