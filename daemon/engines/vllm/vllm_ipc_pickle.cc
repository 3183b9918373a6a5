#include "daemon/engines/vllm/vllm_ipc_pickle.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "common/torch_ipc/pickle_writer.h"

namespace wsync {
namespace {

// A dict keyed by GPU UUID: each key once, none empty (the worker looks its own up).
absl::Status CheckGpuKeys(absl::Span<const TensorOnGpu> entries, absl::string_view what) {
  if (entries.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " names no GPU"));
  absl::flat_hash_set<absl::string_view> seen;
  for (const TensorOnGpu& e : entries) {
    if (e.gpu_uuid.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": an empty GPU UUID"));
    }
    if (!seen.insert(e.gpu_uuid).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": GPU UUID '", e.gpu_uuid, "' given twice"));
    }
  }
  return absl::OkStatus();
}

// {uuid: entry, ...}: EMPTY_DICT MARK (key value)... SETITEMS.
absl::Status WriteGpuDict(absl::Span<const TensorOnGpu> entries, VllmEntryForm form,
                          PickleWriter* out) {
  out->EmptyDict();
  out->Mark();
  for (const TensorOnGpu& e : entries) {
    WSYNC_RETURN_IF_ERROR(out->Unicode(e.gpu_uuid));
    const absl::Status written = form == VllmEntryForm::kFuncArgs ? WriteRebuildPair(e.tensor, out)
                                                                  : WriteRebuildArgs(e.tensor, out);
    WSYNC_RETURN_IF_ERROR(PrefixStatus(absl::StrCat("GPU '", e.gpu_uuid, "'"), written));
  }
  out->SetItems();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> VllmIpcHandlesPickle(absl::Span<const std::vector<TensorOnGpu>> names,
                                                 VllmEntryForm form) {
  PickleWriter out;
  out.EmptyList();
  if (!names.empty()) {
    out.Mark();
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string what = absl::StrCat("name #", i);
      WSYNC_RETURN_IF_ERROR(CheckGpuKeys(names[i], what));
      WSYNC_RETURN_IF_ERROR(PrefixStatus(what, WriteGpuDict(names[i], form, &out)));
    }
    out.Appends();
  }
  return std::move(out).Finish();
}

absl::StatusOr<std::string> VllmPackedIpcHandlesPickle(absl::Span<const TensorOnGpu> chunk) {
  WSYNC_RETURN_IF_ERROR(CheckGpuKeys(chunk, "packed chunk"));
  for (const TensorOnGpu& e : chunk) {
    WSYNC_RETURN_IF_ERROR(CheckUint8Buffer(e.tensor, absl::StrCat("GPU '", e.gpu_uuid, "'")));
  }
  PickleWriter out;
  WSYNC_RETURN_IF_ERROR(WriteGpuDict(chunk, VllmEntryForm::kArgsOnly, &out));
  return std::move(out).Finish();
}

}  // namespace wsync
