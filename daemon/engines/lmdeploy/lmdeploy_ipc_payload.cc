#include "daemon/engines/lmdeploy/lmdeploy_ipc_payload.h"

#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_ipc/torch_ipc_pickle.h"
#include "daemon/engines/lmdeploy/lmdeploy_ipc_pickle.h"
#include "daemon/transport/ipc/ipc_view.h"

namespace wsync {
namespace {

// LMDeploy overwrites rebuild argument 6 with torch.cuda.current_device(), so any index does.
constexpr int kDeviceIndex = 0;

// `bytes` as whole elements of `item` bytes, or INVALID_ARGUMENT naming `what`.
absl::StatusOr<uint64_t> Elements(uint64_t bytes, uint64_t item, absl::string_view what,
                                  DType dtype) {
  if (bytes % item != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " at byte ", bytes, " is not on a ", DTypeName(dtype), " boundary"));
  }
  return bytes / item;
}

absl::StatusOr<std::string> FlattenedPickle(const BucketManifest& manifest,
                                            const IpcBucketView& view, bool send_tensor) {
  WSYNC_ASSIGN_OR_RETURN(const DType dtype, LmdeployBucketDtype(manifest));
  const uint64_t item = DTypeSize(dtype);
  WSYNC_ASSIGN_OR_RETURN(CudaIpcTensor flat, IpcStorage(view, kDeviceIndex));
  if (view.memory_kind == MemoryKind::kCudaIpc && view.event_handle.empty()) {
    // LMDeploy opens event_ipc_handle whenever the key is there (on torch builds that can), and
    // 64 zero bytes are no event on a GPU.
    return absl::InternalError("a CUDA slot without an IPC event; LMDeploy would open a zero one");
  }
  // The whole allocation, in whole elements: the same tensor serves every slot of it.
  const uint64_t numel = view.allocation_bytes / item;
  WSYNC_ASSIGN_OR_RETURN(const uint64_t first, Elements(view.offset, item, "the bucket", dtype));
  WSYNC_ASSIGN_OR_RETURN(const uint64_t span,
                         Elements(manifest.span_bytes(), item, "the bucket's end", dtype));
  if (first > numel || span > numel - first) {
    return absl::OutOfRangeError(absl::StrCat("a bucket of ", manifest.span_bytes(), " bytes at ",
                                              view.offset, " runs past its allocation of ",
                                              view.allocation_bytes, " bytes"));
  }
  flat.dtype = std::string(DTypeName(dtype));
  flat.shape = {static_cast<int64_t>(numel)};
  flat.element_offset = 0;
  LmdeployFlattenedBucket bucket;
  for (const TensorEntry& t : manifest.tensors) {
    const std::string what = absl::StrCat("tensor '", t.name, "'");
    WSYNC_ASSIGN_OR_RETURN(const uint64_t start, Elements(t.offset, item, what, dtype));
    WSYNC_ASSIGN_OR_RETURN(const uint64_t count, Elements(t.length, item, what + "'s end", dtype));
    bucket.metadata.push_back(FlattenedTensorMetadata{t.name, t.shape, flat.dtype, first + start,
                                                      first + start + count, count});
  }
  if (!view.event_handle.empty()) bucket.event_ipc_handle = view.event_handle;
  if (send_tensor) bucket.flattened_tensor = std::move(flat);
  return LmdeployFlattenedBucketPickle(bucket);
}

absl::StatusOr<std::string> PerTensorPickle(const BucketManifest& manifest,
                                            const IpcBucketView& view) {
  WSYNC_ASSIGN_OR_RETURN(const CudaIpcTensor storage, IpcStorage(view, kDeviceIndex));
  std::vector<NamedCudaTensor> tensors;
  for (const TensorEntry& t : manifest.tensors) {
    CudaIpcTensor tensor = storage;
    tensor.dtype = std::string(DTypeName(t.dtype));
    tensor.shape = t.shape;
    WSYNC_ASSIGN_OR_RETURN(tensor.element_offset,
                           Elements(view.offset + t.offset, DTypeSize(t.dtype),
                                    absl::StrCat("tensor '", t.name, "'"), t.dtype));
    tensors.push_back(NamedCudaTensor{t.name, std::move(tensor)});
  }
  return LmdeployNamedTensorsPickle(tensors);
}

nlohmann::json Body(nlohmann::json serialized, BucketFormat format, bool finished) {
  return {{"serialized_named_tensors", std::move(serialized)},
          {"load_format", format == BucketFormat::kFlattened ? nlohmann::json("flattened_bucket")
                                                             : nlohmann::json(nullptr)},
          {"finished", finished}};
}

}  // namespace

absl::StatusOr<DType> LmdeployBucketDtype(const BucketManifest& manifest) {
  if (manifest.tensors.empty()) return absl::InvalidArgumentError("a bucket with no tensor");
  const DType dtype = manifest.tensors.front().dtype;
  for (const TensorEntry& t : manifest.tensors) {
    if (t.dtype != dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' is ", DTypeName(t.dtype), " in a ", DTypeName(dtype),
                       " bucket; LMDeploy's flattened_bucket casts every tensor to the bucket's "
                       "dtype, so a bucket holds one dtype"));
    }
  }
  return dtype;
}

absl::StatusOr<nlohmann::json> LmdeployIpcBucketBody(const BucketManifest& manifest,
                                                     const std::vector<IpcBucketView>& ranks,
                                                     BucketFormat format, bool finished,
                                                     const std::vector<bool>& send_tensor) {
  if (ranks.empty()) return absl::InvalidArgumentError("an IPC bucket for no TP rank");
  if (!send_tensor.empty() && send_tensor.size() != ranks.size()) {
    return absl::InternalError(absl::StrCat("whether to send the flattened tensor is given for ",
                                            send_tensor.size(), " of ", ranks.size(), " ranks"));
  }
  nlohmann::json serialized = nlohmann::json::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const IpcBucketView& view = ranks[r];
    auto pickle = format == BucketFormat::kFlattened
                      ? FlattenedPickle(manifest, view, send_tensor.empty() || send_tensor[r])
                      : PerTensorPickle(manifest, view);
    if (!pickle.ok()) {
      return absl::Status(pickle.status().code(),
                          absl::StrCat("GPU ", view.gpu_uuid, ": ", pickle.status().message()));
    }
    serialized.push_back(absl::Base64Escape(*pickle));
  }
  return Body(std::move(serialized), format, finished);
}

absl::StatusOr<nlohmann::json> LmdeployFinishOnlyBody(uint32_t ranks, BucketFormat format) {
  if (ranks == 0) return absl::InvalidArgumentError("a finishing request for no TP rank");
  // No tensor and no flattened_tensor: the worker returns before it would cache or open anything,
  // so neither a handle nor the event is read.
  auto pickle = format == BucketFormat::kFlattened
                    ? LmdeployFlattenedBucketPickle(LmdeployFlattenedBucket{})
                    : LmdeployNamedTensorsPickle({});
  if (!pickle.ok()) return pickle.status();
  nlohmann::json serialized = nlohmann::json::array();
  for (uint32_t r = 0; r < ranks; ++r) serialized.push_back(absl::Base64Escape(*pickle));
  return Body(std::move(serialized), format, /*finished=*/true);
}

}  // namespace wsync
