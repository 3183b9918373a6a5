#ifndef WSYNC_DAEMON_ENGINES_VLLM_VLLM_VERSION_H_
#define WSYNC_DAEMON_ENGINES_VLLM_VLLM_VERSION_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/engines/engine_version.h"
#include "daemon/engines/vllm/vllm_ipc_pickle.h"

namespace wsync {

// vLLM's version as GET /version reports it, read by the rules every engine's version follows
// (engine_version.h).
using VllmVersion = EngineVersion;
inline absl::StatusOr<VllmVersion> ParseVllmVersion(absl::string_view text) {
  return ParseEngineVersion(text);
}

// Where a generation of vLLM's NCCL backend reads `packed` and its sizes. Its init and update
// dataclasses are built with **dict and refuse an unknown key, so the fields go exactly where the
// generation reads them. (A design that moved them into the server's --weight-transfer-config,
// vLLM PR #47357, was closed unmerged: no release reads them from there.)
enum class VllmPackedAt {
  kUpdateInfo,  // each /update_weights request's update_info (0.16.0 to 0.27.x)
  kInitInfo,    // /init_weight_transfer_engine's init_info (0.28.0, PR #50902)
};

// What one generation of vLLM's weight transfer expects on the wire (see vllm_options.h for
// the boundaries and where they were read).
struct VllmVariant {
  std::string name;  // e.g. "ipc-args-session", for logs and `wsyncctl engines`
  // The value under each GPU UUID of ipc_handles_pickled: (rebuild_cuda_tensor, ARGS) or ARGS.
  VllmEntryForm entry_form = VllmEntryForm::kFuncArgs;
  // POST /start_weight_update and /finish_weight_update exist (PR #39212); every update must sit
  // between them.
  bool session_routes = false;
  // update_info may be packed: {ipc_handles: one dict for a uint8 chunk, tensor_sizes, packed}
  // (PR #37476).
  bool packed_ipc = false;
  // The packed body also carries first_chunk / last_chunk (the update-info fields the producer of
  // the packed generation sends).
  bool chunk_flags = false;
  // /finish_weight_update reads {"weight_version": str}.
  bool finish_weight_version = false;
  // NCCL backend only: where `packed` is read, and whether init_info reads nccl_unique_id_b64.
  VllmPackedAt nccl_packed_at = VllmPackedAt::kUpdateInfo;
  bool nccl_unique_id = false;
};

// The first release whose IPC engine wsyncd can drive (PR #34171).
inline constexpr char kVllmMinIpcVersion[] = "0.17.0";

// The first release with the NCCL weight-transfer engine, and the first whose init_info reads
// nccl_unique_id_b64.
inline constexpr char kVllmMinNcclVersion[] = "0.16.0";
inline constexpr char kVllmMinUniqueIdVersion[] = "0.30.0";

// The variant of `version`; FAILED_PRECONDITION naming the version and kVllmMinIpcVersion when it
// has no IPC weight transfer at all.
absl::StatusOr<VllmVariant> VllmVariantFor(const VllmVersion& version);
// The same for the NCCL backend: FAILED_PRECONDITION naming the version and kVllmMinNcclVersion
// below it.
absl::StatusOr<VllmVariant> VllmNcclVariantFor(const VllmVersion& version);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_VLLM_VLLM_VERSION_H_
