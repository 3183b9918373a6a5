#include "daemon/engines/vllm/vllm_version.h"

#include "absl/strings/str_cat.h"

namespace wsync {

absl::StatusOr<VllmVariant> VllmVariantFor(const VllmVersion& version) {
  if (!version.AtLeast(0, 17, 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vLLM ", version.text, " has no CUDA IPC weight transfer; wsyncd needs vLLM >= ",
        kVllmMinIpcVersion, " (started with --weight-transfer-config '{\"backend\": \"ipc\"}')"));
  }
  VllmVariant v;
  if (!version.AtLeast(0, 22, 0)) {
    v.name = "ipc-func-args";
    v.entry_form = VllmEntryForm::kFuncArgs;
    return v;
  }
  v.entry_form = VllmEntryForm::kArgsOnly;
  v.session_routes = true;
  v.packed_ipc = true;
  v.chunk_flags = true;
  if (!version.AtLeast(0, 29, 0)) {
    v.name = "ipc-args-session";
    return v;
  }
  v.name = "ipc-args-session-version";
  v.finish_weight_version = true;
  return v;
}

}  // namespace wsync
