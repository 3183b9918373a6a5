#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_ADAPTER_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_ADAPTER_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/core/engine_adapter.h"
#include "daemon/engines/http_json.h"
#include "daemon/engines/sglang/sglang_options.h"
#include "daemon/engines/sglang/sglang_path.h"
#include "daemon/engines/sglang/sglang_sessions.h"
#include "daemon/engines/sglang/sglang_version.h"
#include "nlohmann/json.hpp"

namespace wsync {

class SglangBroadcastBinding;
class SglangIpcBinding;
class SglangIpcStreamBinding;

// SGLang's disaggregated weight-update API (docs/engines/sglang.md): ranks are
// rank_offset + tp_rank; a bucket goes as load_format "flattened_bucket" (one uint8 broadcast of
// the tensors' bytes back to back in `names` order) or null (one broadcast per tensor, typed); the
// version is recorded at commit. Its engines join through torch's TCPStore.
//
// One binding per data path (sglang_broadcast_binding.h, sglang_ipc_binding.h,
// sglang_ipc_stream_binding.h); the group's options decide which IPC path the adapter offers
// (ipc_route). On the IPC paths Probe also reads the server's version, once each time the group
// forms, and picks the payload from it (sglang_version.h has the table and docs/engines/sglang.md
// the evidence): a server too old for the group's load_format is refused naming its version and
// the minimum. The broadcast path reads no version.
//
// On every path Probe also asks whether the server has weight-update sessions
// (sglang_sessions.h). Where it has, every update sits inside POST /begin_weight_update
// {"selector": "all"} (after pausing) and /end_weight_update (before the version is recorded, or
// best effort when an update is aborted), and every bucket request says "selector": "all".
class SglangAdapter final : public EngineAdapter {
 public:
  // `data_path`, when given, is used at once (UseDataPath), as a group would.
  SglangAdapter(EngineEndpoint endpoint, AdapterTimeouts timeouts, SglangOptions options,
                absl::string_view data_path = "");
  ~SglangAdapter() override;

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
  std::vector<std::string> TakeCommitWarnings() override;
  absl::Status CheckBucketReply(const HttpReply& reply) const override;

  DataPathBinding* Binding(absl::string_view data_path) override;
  absl::Status UseDataPath(absl::string_view data_path) override;

  // What Probe requires of the engine's /get_server_info answer (a JSON object).
  static absl::Status CheckServerInfo(const nlohmann::json& info, const EngineEndpoint& endpoint);
  // On the IPC paths: the server's version (the "version" of /get_server_info) and the
  // payload it gets with `format`, or FAILED_PRECONDITION naming the version and the minimum.
  // `forced`: the group's engine_version (engine_version.h); `route_documented`: the server's
  // OpenAPI document lists the route's path (a pre-release then passes the route's gate).
  static absl::StatusOr<std::pair<SglangVersion, SglangIpcVariant>> CheckIpcVersion(
      const nlohmann::json& info, const std::string& url, BucketFormat format,
      SglangIpcRoute route = SglangIpcRoute::kTensor, const SglangVersion* forced = nullptr,
      bool route_documented = false);
  // The IPC variant the last successful Probe picked; nullopt before one and on the broadcast.
  std::optional<SglangIpcVariant> ipc_variant() const;
  std::string probed_version() const override;
  std::string ManualResumeHint() const override { return "POST /continue_generation"; }
  // POST /weights_checker {"action": "checksum"}; UNIMPLEMENTED where the build has none (404).
  absl::StatusOr<WeightChecksums> ChecksumWeights() override;

  // Whether the last successful Probe found weight-update sessions.
  bool sessions() const;

 private:
  friend class SglangBroadcastBinding;
  friend class SglangIpcBinding;
  friend class SglangIpcStreamBinding;
  friend class SglangIpcPath;

  EngineEndpoint endpoint_;
  AdapterTimeouts timeouts_;
  // Resumes the KV cache if this update resumed the weights and it is still released.
  absl::Status ResumeKvCache();
  // Ends the open session, if any; the session counts as closed only once the server said so.
  absl::Status EndSession();
  // With memory "resume": the weights' memory, before the first bucket.
  absl::Status ResumeWeights();
  // The IPC paths' part of Probe and Health: the version read from /get_server_info.
  absl::Status ProbeIpcVersion(const nlohmann::json& info);
  // CheckIpcVersion with this group's engine_version and what the last Probe read of the routes.
  absl::StatusOr<std::pair<SglangVersion, SglangIpcVariant>> CheckOwnIpcVersion(
      const nlohmann::json& info) const;
  void AddIpcHealth(const nlohmann::json& info, EngineHealth* health) const;
  // The routes every update of the group calls: refused at Probe when the OpenAPI document lacks
  // one.
  std::vector<std::string> NeededRoutes() const;
  // The last bucket's request (when the trainer marked it) carries what SGLang's own trainers
  // send with it: the version's label ("weight_version", recorded by the server once the request
  // succeeds, and said in its answer) and, where nothing must come between the load and the
  // flush, the cache flush. Each then costs the commit no request of its own.
  void LabelRequest(const std::string& version, bool last, nlohmann::json* body) const;
  // Whether the flush may ride on the last bucket: not where the KV cache is resumed at the commit
  // (it is flushed once back) nor inside a weight-update session (the server may finish loading
  // at its end).
  bool FlushRidesLocked() const;
  // What this update's last bucket carried, and what the server's answer to it said.
  struct LastBucket {
    bool label_sent = false;   // weight_version
    bool flush_sent = false;   // flush_cache true
    bool label_taken = false;  // the answer said the label was recorded
  };
  // This update's, reset for the next.
  LastBucket TakeLastBucket();
  // Sets the version's label after the commit unless the last bucket did, or notes why it could
  // not (a warning).
  void RecordVersionLabel(const UpdateInfo& update, const LastBucket& last);
  // After a label sent in the last bucket's request: a warning if the server reports another
  // weight_version (or cannot be asked), else "".
  std::string CheckLabelTaken(const std::string& version) const;
  // The layout checks of the routes that take the bucket's tensors as they lie (the broadcast,
  // update_weights_from_tensor).
  absl::Status ValidateTensorLayout(const BucketManifest& manifest) const;

  BucketFormat format_;
  // The group's engine_version: what the version gates read instead of the engine's own.
  std::optional<SglangVersion> forced_version_;
  SglangMemory memory_;
  SglangIpcRoute route_;
  EngineHttp http_;
  mutable std::mutex mu_;
  std::unique_ptr<SglangBroadcastBinding> broadcast_;
  // One of the two, as ipc_route says.
  std::unique_ptr<SglangIpcBinding> ipc_;
  std::unique_ptr<SglangIpcStreamBinding> stream_;
  SglangPath* path_ = nullptr;  // the used binding's SGLang side; set by UseDataPath
  std::optional<SglangIpcVariant> ipc_variant_;  // set by Probe on an IPC path
  std::string version_text_;                     // the version the last Probe read
  bool kv_cache_released_ = false;               // weights resumed by BeginUpdate, KV cache not yet
  // Resuming the weights failed, so they may still be released: the resume that follows is
  // refused.
  bool weights_unknown_ = false;
  bool sessions_ = false;    // set by Probe
  bool documented_ = false;  // Probe read the routes from the server's OpenAPI document
  // Whether the server serves /update_weight_version (Probe; nullopt: not told, so it is asked).
  std::optional<bool> version_route_;
  mutable LastBucket last_bucket_;            // this update's
  std::vector<std::string> commit_warnings_;  // since the last TakeCommitWarnings
  bool session_open_ = false;                 // begun and not yet ended (or its end failed)
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_ADAPTER_H_
