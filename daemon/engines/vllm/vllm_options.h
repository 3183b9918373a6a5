#ifndef WSYNC_DAEMON_ENGINES_VLLM_VLLM_OPTIONS_H_
#define WSYNC_DAEMON_ENGINES_VLLM_VLLM_OPTIONS_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/core/group_spec.h"

namespace wsync {

// How vLLM's POST /pause?mode=... treats the requests in flight (docs/engines/vllm.md):
// keep freezes them in the queue until /resume, wait lets them finish first, abort ends them.
enum class VllmPauseMode { kKeep, kWait, kAbort };

absl::string_view VllmPauseModeName(VllmPauseMode mode);
absl::StatusOr<VllmPauseMode> ParseVllmPauseMode(absl::string_view name);

// How a broadcast group's vLLM workers find wsyncd's communicator (docs/engines/vllm.md, "The NCCL
// backend").
enum class VllmRendezvous {
  kStore,     // master_address/master_port: StatelessProcessGroup over wsyncd's TCPStore
  kUniqueId,  // nccl_unique_id_b64 in init_info: no store, every rank enters init at once
};
absl::string_view VllmRendezvousName(VllmRendezvous mode);  // "store", "unique-id"
absl::StatusOr<VllmRendezvous> ParseVllmRendezvous(absl::string_view name);

// vLLM's packed_buffer_size_bytes default (packed_tensor.py): 1 GiB.
inline constexpr uint64_t kVllmDefaultPackedChunkBytes = uint64_t{1} << 30;

// Version gates (docs/engines/vllm.md), as read for this adapter; vllm_version.cc applies them
// to GET /version.
//
//   behaviour                              before                        from
//   IPC weight-transfer engine             absent (0.16.0: NCCL only)    0.17.0
//   entry under each GPU UUID              (rebuild_cuda_tensor, ARGS)   0.22.0: ARGS alone
//   packed IPC (one dict, tensor_sizes)    absent                        0.22.0
//   /start_ and /finish_weight_update      absent (404)                  0.22.0
//   finish reads {"weight_version"}        no body read                  0.29.0
//
// The NCCL backend (VllmNcclVariantFor), its own gates:
//
//   behaviour                              before                        from
//   NCCL weight-transfer engine            absent                        0.16.0
//   packed, packed_buffer_size_bytes,      in update_info                0.28.0: in init_info
//     packed_num_buffers
//   init_info.nccl_unique_id_b64           absent (store only)           0.30.0
//   session routes, finish weight_version  as the IPC rows above
//
// Where each boundary was read, and how sure it is (R read, I inferred; a dev or rc build counts
// as the release before it): docs/engines/vllm.md, "Version gates" and "The NCCL backend".
//
// A group's vLLM-only settings, each the wire choice of one engine that the operator must match
// to the server (every default is the choice that is correct on every supported server, or the
// one that touches nothing the operator did not ask for):
//
//  packed              false: one /update_weights per bucket naming each tensor as its own IPC
//                      view (one dict per name). true: the bucket as one uint8 chunk plus
//                      tensor_sizes (vLLM >= 0.22.0 only; on builds whose --weight-transfer-config
//                      fixes `packed`, this must equal the server's setting).
//  pause_mode          keep (default): requests in flight wait in the queue and go on with the new
//                      weights after /resume; nothing is aborted and /pause does not wait.
//  wake_weights        false (default): an engine found asleep (GET /is_sleeping) is refused,
//                      because loading into a sleeping vLLM crashes its EngineCore (#57853) and
//                      waking it takes GPU memory the colocated trainer may hold. true: wsyncd
//                      wakes `weights` before the update and `kv_cache` after it, the colocated
//                      flow.
//  reset_prefix_cache  true (default): POST /reset_prefix_cache after finishing, since the cached
//                      KV was computed with the old weights.
//  rendezvous          broadcast groups: store (default; every vLLM with the NCCL backend) or
//                      unique-id (vLLM >= kVllmMinUniqueIdVersion).
//  packed_chunk_bytes  broadcast groups, packed: the chunk size both sides cut by, vLLM's
//                      packed_buffer_size_bytes (default 1 GiB), sent with `packed`.
//
// On the NCCL path `packed` is the wire format too: uint8 chunks (packed) or one broadcast per
// tensor, sent to the workers in the field their generation reads, so they always agree.
class VllmOptions final : public EngineOptions {
 public:
  VllmOptions() = default;
  VllmOptions(bool packed, VllmPauseMode pause_mode, bool wake_weights, bool reset_prefix_cache,
              VllmRendezvous rendezvous = VllmRendezvous::kStore,
              uint64_t packed_chunk_bytes = kVllmDefaultPackedChunkBytes,
              std::string engine_version = "")
      : packed_(packed),
        pause_mode_(pause_mode),
        wake_weights_(wake_weights),
        reset_prefix_cache_(reset_prefix_cache),
        rendezvous_(rendezvous),
        packed_chunk_bytes_(packed_chunk_bytes),
        engine_version_(std::move(engine_version)) {}

  absl::string_view kind() const override { return "vllm"; }
  absl::Status Validate() const override;
  bool Equals(const EngineOptions& other) const override;
  // "unpacked, pause=keep, no wake, reset_prefix_cache".
  std::string Describe() const override;

  bool packed() const { return packed_; }
  VllmPauseMode pause_mode() const { return pause_mode_; }
  bool wake_weights() const { return wake_weights_; }
  bool reset_prefix_cache() const { return reset_prefix_cache_; }
  VllmRendezvous rendezvous() const { return rendezvous_; }
  uint64_t packed_chunk_bytes() const { return packed_chunk_bytes_; }
  // The release the version gates read every engine as ("": each engine's own; engine_version.h).
  const std::string& engine_version() const { return engine_version_; }

 private:
  bool packed_ = false;
  VllmPauseMode pause_mode_ = VllmPauseMode::kKeep;
  bool wake_weights_ = false;
  bool reset_prefix_cache_ = true;
  VllmRendezvous rendezvous_ = VllmRendezvous::kStore;
  uint64_t packed_chunk_bytes_ = kVllmDefaultPackedChunkBytes;
  std::string engine_version_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_VLLM_VLLM_OPTIONS_H_
