#ifndef WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_ADAPTER_H_
#define WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_ADAPTER_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/engines/http_json.h"
#include "daemon/engines/lmdeploy/lmdeploy_options.h"
#include "daemon/engines/lmdeploy/lmdeploy_path.h"
#include "daemon/engines/openapi_routes.h"

namespace wsync {

class LmdeployBroadcastBinding;
class LmdeployIpcBinding;

// LMDeploy's PyTorch engine (docs/engines/lmdeploy.md), one binding per data path. Colocated
// (lmdeploy_ipc_binding.h): every bucket is one POST /update_weights naming wsyncd's slot over
// CUDA IPC (lmdeploy_ipc_payload.h). Disaggregated (lmdeploy_broadcast_binding.h, PR #4638): the
// engine's ranks join wsyncd's collective
// through torch's TCPStore (POST /init_weights_update_group with its required group_name), and
// every bucket is one POST /update_weights_from_distributed whose receive runs while wsyncd
// broadcasts (lmdeploy_nccl_payload.h): one element-typed broadcast per flattened bucket of one
// dtype, or one per tensor. Its answers are {success, message}; 501 means a backend other than
// pytorch, which has no such routes, and is a configuration error. A server without the init
// route is refused a broadcast group at Probe.
//
// Probe: LMDeploy has no version route, so the routes are read from GET /openapi.json. A server
// whose document lacks POST /update_weights, /sleep or /wakeup is refused, naming what is
// missing; one that serves no OpenAPI document (started with --disable-fastapi-docs, which
// answers 404) is refused naming that flag. Whether POST /init_weights_update_group is there
// (PR #4638, the NCCL path) is kept for that path.
//
// Health: GET /health (200 while healthy or sleeping) and GET /is_sleeping; for a version, what
// the last Probe read of the routes.
//
// An update, as the clean cut LMDeploy offers (it has no pause route):
//   PauseGeneration  POST /sleep?level=1          stops every session and moves the weights to
//                                                 host memory; the KV cache is freed
//   BeginUpdate      POST /wakeup?tags=weights    weights back on the GPU, the engine still
//                                                 asleep for inference: never load into a
//                                                 sleeping engine's weights
//   buckets          POST /update_weights ...     finished true on the trainer's last bucket
//   FinishUpdate     (a finish-only /update_weights, when no bucket was marked last)
//                    POST /wakeup?tags=kv_cache   the KV cache back, serving the new weights
//   ResumeGeneration POST /wakeup                 every sleeping tag (an aborted or failed update,
//                                                 wsyncctl resume-engine)
// Level 1, not 2: level 2 discards the weights, and an update that sends only some tensors
// would leave the rest empty. Sleeping aborts the engine's requests in flight (LMDeploy's
// stop_all_session); their clients see them end, which is the price of a clean cut. Every one of
// these POSTs carries Content-Type: application/json, without which LMDeploy refuses even the
// bodiless /sleep and /wakeup.
//
// Finishing: LMDeploy has no version route; the update's end is `finished: true`, which runs the
// model's post-load hooks. It rides on the bucket the trainer marked last (BucketContext.last);
// when none was (a client streaming tensors may not know its last bucket in time), FinishUpdate
// sends one request that loads nothing and finishes (LmdeployFinishOnlyBody), which LMDeploy's
// update_params allows: empty metadata loads no weight, and the finished hooks still run. A
// finish that fails leaves the engine asleep, as a failed commit leaves an SGLang engine paused:
// weights whose post-load hooks did not run are not to be served.
//
// The flattened tensor, once per version, GPU and dtype: a device's slots are regions of one
// allocation, and the worker caches one live view of it (require_clone false) until `finished`
// or a sleep, so each rank gets flattened_tensor only when what it holds differs from what the
// bucket needs: nothing yet in this update (the update began with a sleep, which drops it),
// another allocation (the oversize slot, a trainer allocation read in place) or another dtype.
// What a rank holds is known only while every request of the update succeeds: a failed answer,
// a finish, a sleep or a new update forgets it, and the next request sends the tensor again.
// Requests of one update go out in order on one pipelined channel and the engine takes them in
// that order, so the state after request k is what request k+1 meets.
//
// Bucket answers: /update_weights answers `null` with HTTP 200; an exception in the engine is a
// 500. A 400 that refuses pickled tensors (PR #4964, pending upstream) is a configuration error
// naming LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS=1, never retried. No error carries the engine's
// words (they go to the debug log).
class LmdeployAdapter final : public EngineAdapter {
 public:
  // `data_path`, when given, is used at once (UseDataPath), as a group would.
  LmdeployAdapter(EngineEndpoint endpoint, AdapterTimeouts timeouts, LmdeployOptions options,
                  absl::string_view data_path = "");
  ~LmdeployAdapter() override;

  const EngineEndpoint& endpoint() const override { return endpoint_; }
  void SetRankOffset(uint32_t rank_offset) override { endpoint_.rank_offset = rank_offset; }
  AdapterCapabilities Capabilities() const override;
  absl::Status Probe() override;
  EngineHealth Health() override;
  absl::Status ValidateBucket(const BucketManifest& manifest) const override;
  absl::Status PauseGeneration() override;
  absl::Status ResumeGeneration() override;
  // What the workers cached belongs to the update that ended.
  void AbandonUpdate() override;
  absl::Status BeginUpdate(const UpdateInfo& update) override;
  absl::Status FinishUpdate(const UpdateInfo& update) override;
  absl::Status CheckBucketReply(const HttpReply& reply) const override;
  // What the routes told (LMDeploy has no version route); it has no weight checker either.
  std::string probed_version() const override;
  std::string ManualResumeHint() const override { return "POST /wakeup"; }

  DataPathBinding* Binding(absl::string_view data_path) override;
  absl::Status UseDataPath(absl::string_view data_path) override;

  // What Probe found in the engine's OpenAPI document: whether it has the NCCL path's routes
  // (POST /init_weights_update_group, PR #4638). False until a Probe succeeds.
  bool has_weights_update_group() const { return has_weights_update_group_.load(); }

  // What Probe requires of the answer to GET /openapi.json; returns whether the NCCL path's
  // init route is there. A route the document does not list is asked of the server through
  // `asker` before it counts as absent; without one, the document alone decides. Exposed for
  // tests.
  static absl::StatusOr<bool> CheckOpenApi(const HttpReply& reply, const std::string& url,
                                           RouteAsker* asker = nullptr);

 private:
  friend class LmdeployBroadcastBinding;
  friend class LmdeployIpcBinding;

  EngineEndpoint endpoint_;
  AdapterTimeouts timeouts_;
  BucketFormat format_;
  EngineHttp http_;
  std::unique_ptr<LmdeployBroadcastBinding> broadcast_;
  std::unique_ptr<LmdeployIpcBinding> ipc_;
  LmdeployPath* path_ = nullptr;  // the used binding's LMDeploy side; set by UseDataPath
  std::atomic<bool> has_weights_update_group_{false};
  std::atomic<bool> probed_{false};  // a Probe has read the routes
  // Forgets what the ranks' workers cache (they dropped it, or it cannot be known).
  void ForgetHeldLocked() const;

  // What one rank's worker caches as _update_params_ipc_tensor.
  struct HeldTensor {
    std::string memory_handle;
    uint64_t allocation_bytes = 0;
    DType dtype = DType::kUint8;
    bool operator==(const HeldTensor& other) const {
      return memory_handle == other.memory_handle && allocation_bytes == other.allocation_bytes &&
             dtype == other.dtype;
    }
  };

  mutable std::mutex mu_;
  // The update whose bucket request carried finished: true (only the update's own id counts).
  mutable std::string finished_update_;
  // The update `held_` belongs to, and per TP rank the tensor its worker holds (empty: none).
  mutable std::string held_update_;
  mutable std::vector<std::optional<HeldTensor>> held_;
  // The engine group the ranks joined (the broadcast binding's InitGroup), for the finish-only
  // request.
  std::string group_name_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_ADAPTER_H_
