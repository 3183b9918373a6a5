#include "daemon/engines/sglang/sglang_ipc_stream_binding.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/engines/sglang/sglang_adapter.h"

namespace wsync {

absl::StatusOr<EngineRequest> SglangIpcStreamBinding::StreamRequest(
    const UpdateInfo& update, const std::vector<IpcStreamRank>& ranks) const {
  const EngineEndpoint& endpoint = adapter_.endpoint_;
  if (ranks.size() != endpoint.ranks) {
    return absl::InternalError(absl::StrCat("engine ", endpoint.url, " has ", endpoint.ranks,
                                            " TP rank(s) but the stream has ", ranks.size()));
  }
  // Each rank looks itself up as "GPU-" + str(torch.cuda.get_device_properties(d).uuid).
  nlohmann::json handles = nlohmann::json::object();
  for (const IpcStreamRank& rank : ranks) {
    const std::string key = absl::StrCat("GPU-", rank.gpu_uuid);
    if (handles.contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine ", endpoint.url, " has two TP ranks on GPU ", rank.gpu_uuid,
                       ", which SGLang's map-once route cannot tell apart (it keys ranks by GPU)"));
    }
    handles[key] = rank.address;
  }
  // flush_cache defaults to true on this route; the adapter says whether it rides on this request.
  nlohmann::json body = {{"zmq_handles", std::move(handles)}, {"flush_cache", false}};
  // Answered once every weight is in: the one request of the update is its last, and carries the
  // label (and the flush) as the last bucket does.
  adapter_.LabelRequest(update.version, /*last=*/true, &body);
  return EngineRequest{bucket_path(), body.dump()};
}

absl::Status SglangIpcStreamBinding::ValidateBucket(const BucketManifest& manifest) const {
  for (const TensorEntry& t : manifest.tensors) {
    if (t.offset % DTypeSize(t.dtype) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' starts at byte ",
                                                     t.offset, ", not aligned to its ",
                                                     DTypeName(t.dtype), " elements"));
    }
  }
  return absl::OkStatus();
}

}  // namespace wsync
