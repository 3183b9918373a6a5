#include "daemon/engines/vllm/vllm_version.h"

#include "absl/strings/str_cat.h"

namespace wsync {
namespace {

// The session routes (PR #39212) and finish's weight_version: the same releases for both backends.
void ApplySessionGates(const VllmVersion& version, VllmVariant& v) {
  v.session_routes = version.AtLeast(0, 22, 0);
  v.finish_weight_version = version.AtLeast(0, 29, 0);
}

}  // namespace

absl::StatusOr<VllmVariant> VllmVariantFor(const VllmVersion& version) {
  if (!version.AtLeast(0, 17, 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vLLM ", version.Described(), " is read as older than ", kVllmMinIpcVersion,
        ", the first release with CUDA IPC weight transfer; wsyncd needs vLLM >= ",
        kVllmMinIpcVersion, " (started with --weight-transfer-config '{\"backend\": \"ipc\"}')"));
  }
  VllmVariant v;
  ApplySessionGates(version, v);
  if (!version.AtLeast(0, 22, 0)) {
    v.name = "ipc-func-args";
    v.entry_form = VllmEntryForm::kFuncArgs;
    return v;
  }
  v.entry_form = VllmEntryForm::kArgsOnly;
  v.packed_ipc = true;
  v.chunk_flags = true;
  v.name = v.finish_weight_version ? "ipc-args-session-version" : "ipc-args-session";
  return v;
}

absl::StatusOr<VllmVariant> VllmNcclVariantFor(const VllmVersion& version) {
  if (!version.AtLeast(0, 16, 0)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vLLM ", version.Described(), " is read as older than ", kVllmMinNcclVersion,
        ", the first release with NCCL weight transfer; wsyncd needs vLLM >= ", kVllmMinNcclVersion,
        " (started with --weight-transfer-config '{\"backend\": \"nccl\"}')"));
  }
  VllmVariant v;
  ApplySessionGates(version, v);
  v.nccl_packed_at =
      version.AtLeast(0, 28, 0) ? VllmPackedAt::kInitInfo : VllmPackedAt::kUpdateInfo;
  v.nccl_unique_id = version.AtLeast(0, 30, 0);
  v.name = absl::StrCat(
      "nccl", v.session_routes ? "-session" : "",
      v.nccl_packed_at == VllmPackedAt::kInitInfo ? "-packed-at-init" : "-packed-per-update",
      v.finish_weight_version ? "-version" : "", v.nccl_unique_id ? "-unique-id" : "");
  return v;
}

}  // namespace wsync
