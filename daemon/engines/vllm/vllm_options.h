#ifndef WSYNC_DAEMON_ENGINES_VLLM_VLLM_OPTIONS_H_
#define WSYNC_DAEMON_ENGINES_VLLM_VLLM_OPTIONS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/core/group_spec.h"

namespace wsync {

// How vLLM's POST /pause?mode=... treats the requests in flight (engine-protocols.md §4.1):
// keep freezes them in the queue until /resume, wait lets them finish first, abort ends them.
enum class VllmPauseMode { kKeep, kWait, kAbort };

absl::string_view VllmPauseModeName(VllmPauseMode mode);
absl::StatusOr<VllmPauseMode> ParseVllmPauseMode(absl::string_view name);

// Version gates (engine-protocols.md §4.6), as read for this adapter; vllm_version.cc applies them
// to GET /version. Marks: R read in upstream source or docs, I inferred.
//
//   behaviour                              before                        from
//   IPC weight-transfer engine             absent (0.16.0: NCCL only)    0.17.0
//   entry under each GPU UUID              (rebuild_cuda_tensor, ARGS)   0.22.0: ARGS alone
//   packed IPC (one dict, tensor_sizes)    absent                        0.22.0
//   /start_ and /finish_weight_update      absent (404)                  0.22.0
//   finish reads {"weight_version"}        no body read                  0.29.0
//
// Sources:
// - IPC engine: PR #34171 (R). SkyRL PR #1291 (2026-03-07): CUDA IPC "not natively supported in
//   0.16 (will be available in next version)" (R); open-instruct PR #1515: 0.16.0 has the NCCL API.
// - (FUNC, ARGS): vllm/distributed/weight_transfer/ipc_engine.py@406784bd and @02837425 read
//   `func, args = handle` and overwrite args[6] (R).
// - ARGS alone and packed: PR #37476 (multi-GPU and chunked packed IPC, R); a later stored
//   ipc_engine.py (the index gave no commit) reads `args = ipc_handle[uuid]`, calls
//   rebuild_cuda_tensor itself, and its producer sends packed, first_chunk, last_chunk and
//   tensor_sizes with one dict per chunk (R); the v0.22.1 API docs show the packed sender (R);
//   vime PR #55 (2026-05-27): vLLM "expected only the CUDA IPC rebuild args" (R). 0.22.0 (I).
// - Session routes: PR #39212, merged 2026-04 (R); TRL PR #5892 drives pause, start, update,
//   finish, resume "with vllm>=0.22.0" (R).
// - weight_version in finish: §4.1 "newest" (R); 0.29.0 from the versioned docs (I).
//
// The 0.22.0 and 0.29.0 boundaries are the first releases the sources above show with the
// behaviour, not commits bisected in vLLM's history (its repository was too large to fetch here):
// confirm each against a real server (a canary update) before relying on it. A dev or rc build
// counts as the release before it.
//
// A group's vLLM-only settings, each the wire choice of one engine that the operator must match
// to the server (every default is the choice that is correct on every supported server, or the
// one that touches nothing the operator did not ask for):
//
//  packed              false: one /update_weights per bucket naming each tensor as its own IPC
//                      view (one dict per name). true: the bucket as one uint8 chunk plus
//                      tensor_sizes (vLLM >= 0.22.0 only; on builds whose --weight-transfer-config
//                      fixes `packed`, this must equal the server's setting, §4.6).
//  pause_mode          keep (default): requests in flight wait in the queue and go on with the new
//                      weights after /resume; nothing is aborted and /pause does not wait.
//  wake_weights        false (default): an engine found asleep (GET /is_sleeping) is refused,
//                      because loading into a sleeping vLLM crashes its EngineCore (#57853) and
//                      waking it takes GPU memory the colocated trainer may hold. true: wsyncd
//                      wakes `weights` before the update and `kv_cache` after it, the colocated
//                      flow of §4.4.
//  reset_prefix_cache  true (default): POST /reset_prefix_cache after finishing, since the cached
//                      KV was computed with the old weights.
class VllmOptions final : public EngineOptions {
 public:
  VllmOptions() = default;
  VllmOptions(bool packed, VllmPauseMode pause_mode, bool wake_weights, bool reset_prefix_cache)
      : packed_(packed),
        pause_mode_(pause_mode),
        wake_weights_(wake_weights),
        reset_prefix_cache_(reset_prefix_cache) {}

  EngineKind kind() const override { return EngineKind::kVllm; }
  absl::Status Validate() const override { return absl::OkStatus(); }
  bool Equals(const EngineOptions& other) const override;
  // "unpacked, pause=keep, no wake, reset_prefix_cache".
  std::string Describe() const override;

  bool packed() const { return packed_; }
  VllmPauseMode pause_mode() const { return pause_mode_; }
  bool wake_weights() const { return wake_weights_; }
  bool reset_prefix_cache() const { return reset_prefix_cache_; }

 private:
  bool packed_ = false;
  VllmPauseMode pause_mode_ = VllmPauseMode::kKeep;
  bool wake_weights_ = false;
  bool reset_prefix_cache_ = true;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_VLLM_VLLM_OPTIONS_H_
