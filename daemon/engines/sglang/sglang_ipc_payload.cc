#include "daemon/engines/sglang/sglang_ipc_payload.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_ipc/torch_ipc_pickle.h"
#include "daemon/engines/sglang/sglang_ipc_pickle.h"
#include "daemon/transport/ipc/ipc_view.h"

namespace wsync {

namespace {

absl::StatusOr<std::string> RankPickle(const BucketManifest& manifest, const IpcBucketView& view,
                                       BucketFormat format) {
  WSYNC_ASSIGN_OR_RETURN(CudaIpcTensor storage, IpcStorage(view, view.gpu_uuid));
  if (format == BucketFormat::kFlattened) {
    CudaIpcTensor flat = storage;
    flat.dtype = "uint8";
    flat.shape = {static_cast<int64_t>(manifest.span_bytes())};
    flat.element_offset = view.offset;
    std::vector<FlattenedTensorMetadata> metadata;
    for (const TensorEntry& t : manifest.tensors) {
      metadata.push_back(FlattenedTensorMetadata{t.name, t.shape, std::string(DTypeName(t.dtype)),
                                                 t.offset, t.offset + t.length, t.length});
    }
    return SglangFlattenedBucketPickle(flat, metadata);
  }
  std::vector<NamedCudaTensor> tensors;
  for (const TensorEntry& t : manifest.tensors) {
    const uint64_t item = DTypeSize(t.dtype);
    const uint64_t start = view.offset + t.offset;
    if (start % item != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' starts at byte ", start, " of its slot, not on a ",
                       DTypeName(t.dtype), " boundary; SGLang views it in its own dtype"));
    }
    CudaIpcTensor tensor = storage;
    tensor.dtype = std::string(DTypeName(t.dtype));
    tensor.shape = t.shape;
    tensor.element_offset = start / item;
    tensors.push_back(NamedCudaTensor{t.name, std::move(tensor)});
  }
  return SglangNamedTensorsPickle(tensors);
}

}  // namespace

absl::StatusOr<nlohmann::json> SglangIpcBucketBody(const BucketManifest& manifest,
                                                   const std::vector<IpcBucketView>& ranks,
                                                   BucketFormat format) {
  if (ranks.empty()) return absl::InvalidArgumentError("an IPC bucket for no TP rank");
  nlohmann::json serialized = nlohmann::json::array();
  for (const IpcBucketView& view : ranks) {
    auto pickle = RankPickle(manifest, view, format);
    if (!pickle.ok()) {
      return absl::Status(pickle.status().code(),
                          absl::StrCat("GPU ", view.gpu_uuid, ": ", pickle.status().message()));
    }
    serialized.push_back(absl::Base64Escape(*pickle));
  }
  return nlohmann::json{
      {"serialized_named_tensors", std::move(serialized)},
      {"load_format", format == BucketFormat::kFlattened ? nlohmann::json("flattened_bucket")
                                                         : nlohmann::json(nullptr)},
      {"flush_cache", false},
      {"abort_all_requests", false}};
}

}  // namespace wsync
