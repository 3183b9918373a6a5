#include "daemon/engines/lmdeploy/lmdeploy_nccl_payload.h"

#include "common/status_macros.h"
#include "daemon/engines/lmdeploy/lmdeploy_ipc_payload.h"
#include "daemon/engines/torch_group_body.h"

namespace wsync {

namespace {

nlohmann::json LoadFormat(BucketFormat format) {
  return format == BucketFormat::kFlattened ? nlohmann::json("flattened_bucket")
                                            : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json LmdeployDistributedBucketBody(const BucketManifest& manifest,
                                             const std::string& group_name, BucketFormat format,
                                             bool finished) {
  nlohmann::json body = BucketTensorLists(manifest);
  body["group_name"] = group_name;
  body["load_format"] = LoadFormat(format);
  body["finished"] = finished;
  return body;
}

nlohmann::json LmdeployDistributedFinishBody(const std::string& group_name, BucketFormat format) {
  return {{"names", nlohmann::json::array()},  {"dtypes", nlohmann::json::array()},
          {"shapes", nlohmann::json::array()}, {"group_name", group_name},
          {"load_format", LoadFormat(format)}, {"finished", true}};
}

absl::StatusOr<std::vector<BroadcastPiece>> LmdeployBroadcastPieces(const BucketManifest& manifest,
                                                                    BucketFormat format) {
  if (format == BucketFormat::kFlattened) {
    WSYNC_ASSIGN_OR_RETURN(const DType dtype, LmdeployBucketDtype(manifest));
    WSYNC_RETURN_IF_ERROR(ValidateFlattenedLayout(manifest));
    return std::vector<BroadcastPiece>{
        BroadcastPiece{0, manifest.span_bytes() / DTypeSize(dtype), dtype}};
  }
  std::vector<BroadcastPiece> pieces;
  for (const TensorEntry& t : manifest.tensors) {
    pieces.push_back(BroadcastPiece{t.offset, t.length / DTypeSize(t.dtype), t.dtype});
  }
  return pieces;
}

}  // namespace wsync
