#include "daemon/engines/vllm/vllm_ipc_payload.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_ipc/torch_ipc_pickle.h"
#include "daemon/engines/vllm/vllm_ipc_pickle.h"
#include "daemon/transport/ipc/ipc_view.h"

namespace wsync {
namespace {

// vLLM overwrites rebuild argument 6 with the worker's own device index, so any index does.
constexpr int kDeviceIndex = 0;

// The views the dicts hold, one per distinct GPU: every rank's UUID must be there (each worker
// looks its entry up by its GPU's UUID). Ranks on one GPU (TP ranks sharing a device, as host mode
// and a single-GPU test put them) read one entry, so they must see the same memory; two different
// views under one key would hand one rank the other's bytes.
absl::StatusOr<std::vector<IpcBucketView>> DistinctGpus(const std::vector<IpcBucketView>& ranks) {
  if (ranks.empty()) return absl::InvalidArgumentError("an IPC bucket for no TP rank");
  std::vector<IpcBucketView> gpus;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const IpcBucketView& view = ranks[r];
    if (view.gpu_uuid.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TP rank ", r,
          " has no GPU UUID; vLLM's worker looks its entry up by its GPU's UUID and an engine "
          "missing one dies (vLLM #57853), so nothing is sent"));
    }
    auto same = std::find_if(gpus.begin(), gpus.end(),
                             [&](const IpcBucketView& g) { return g.gpu_uuid == view.gpu_uuid; });
    if (same == gpus.end()) {
      gpus.push_back(view);
      continue;
    }
    if (same->memory_handle != view.memory_handle || same->offset != view.offset ||
        same->allocation_bytes != view.allocation_bytes ||
        same->event_handle != view.event_handle) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TP rank ", r, " on GPU ", view.gpu_uuid,
          " sees other memory than an earlier rank on that GPU; vLLM's handle dict holds one "
          "entry per GPU"));
    }
  }
  return gpus;
}

absl::StatusOr<uint64_t> ElementOffset(uint64_t bytes, DType dtype, const std::string& name) {
  const uint64_t item = DTypeSize(dtype);
  if (bytes % item != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' at byte ", bytes,
                                                   " is not on a ", DTypeName(dtype), " boundary"));
  }
  return bytes / item;
}

// Prefixes an error with the rank's GPU, so it says whose view was refused.
absl::Status ForGpu(const absl::Status& s, const IpcBucketView& view) {
  return absl::Status(s.code(), absl::StrCat("GPU ", view.gpu_uuid, ": ", s.message()));
}

absl::StatusOr<std::string> UnpackedPickle(const BucketManifest& manifest,
                                           const std::vector<IpcBucketView>& ranks,
                                           VllmEntryForm form) {
  std::vector<CudaIpcTensor> storages;
  for (const IpcBucketView& view : ranks) {
    auto storage = IpcStorage(view, kDeviceIndex);
    if (!storage.ok()) return ForGpu(storage.status(), view);
    storages.push_back(*std::move(storage));
  }
  std::vector<std::vector<TensorOnGpu>> names;
  for (const TensorEntry& t : manifest.tensors) {
    std::vector<TensorOnGpu>& entry = names.emplace_back();
    for (size_t r = 0; r < ranks.size(); ++r) {
      CudaIpcTensor tensor = storages[r];
      tensor.dtype = std::string(DTypeName(t.dtype));
      tensor.shape = t.shape;
      auto offset = ElementOffset(ranks[r].offset + t.offset, t.dtype, t.name);
      if (!offset.ok()) return ForGpu(offset.status(), ranks[r]);
      tensor.element_offset = *offset;
      entry.push_back(TensorOnGpu{ranks[r].gpu_uuid, std::move(tensor)});
    }
  }
  return VllmIpcHandlesPickle(names, form);
}

absl::StatusOr<std::string> PackedPickle(const BucketManifest& manifest,
                                         const std::vector<IpcBucketView>& ranks) {
  std::vector<TensorOnGpu> chunk;
  for (const IpcBucketView& view : ranks) {
    auto buffer = IpcStorage(view, kDeviceIndex);
    if (!buffer.ok()) return ForGpu(buffer.status(), view);
    buffer->dtype = "uint8";
    buffer->shape = {static_cast<int64_t>(manifest.span_bytes())};
    buffer->element_offset = view.offset;
    chunk.push_back(TensorOnGpu{view.gpu_uuid, *std::move(buffer)});
  }
  return VllmPackedIpcHandlesPickle(chunk);
}

}  // namespace

absl::Status VllmCheckPackedLayout(const BucketManifest& manifest) {
  if (manifest.tensors.empty()) return absl::InvalidArgumentError("a bucket with no tensor");
  uint64_t next = 0;
  for (const TensorEntry& t : manifest.tensors) {
    if (t.offset != next) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "' starts at byte ", t.offset, " of its bucket, not ", next,
          ": vLLM's packed chunk cuts tensors back to back by tensor_sizes, so a packed bucket "
          "has no gaps"));
    }
    next = t.end();
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> VllmIpcBucketBody(const BucketManifest& manifest,
                                                 const std::vector<IpcBucketView>& ranks,
                                                 const VllmVariant& variant, bool packed,
                                                 const BucketContext& context) {
  if (manifest.tensors.empty()) return absl::InvalidArgumentError("a bucket with no tensor");
  WSYNC_ASSIGN_OR_RETURN(const std::vector<IpcBucketView> gpus, DistinctGpus(ranks));
  if (packed && !variant.packed_ipc) {
    return absl::FailedPreconditionError(absl::StrCat(
        "packed IPC updates need a vLLM that reads them (variant ", variant.name, " does not)"));
  }
  nlohmann::json names = nlohmann::json::array();
  nlohmann::json dtype_names = nlohmann::json::array();
  nlohmann::json shapes = nlohmann::json::array();
  nlohmann::json tensor_sizes = nlohmann::json::array();
  for (const TensorEntry& t : manifest.tensors) {
    names.push_back(t.name);
    dtype_names.push_back(std::string(DTypeName(t.dtype)));
    shapes.push_back(t.shape);
    tensor_sizes.push_back(t.length);
  }
  std::string pickle;
  if (packed) {
    WSYNC_RETURN_IF_ERROR(VllmCheckPackedLayout(manifest));
    WSYNC_ASSIGN_OR_RETURN(pickle, PackedPickle(manifest, gpus));
  } else {
    WSYNC_ASSIGN_OR_RETURN(pickle, UnpackedPickle(manifest, gpus, variant.entry_form));
  }
  nlohmann::json info = {{"names", std::move(names)},
                         {"dtype_names", std::move(dtype_names)},
                         {"shapes", std::move(shapes)},
                         {"ipc_handles_pickled", absl::Base64Escape(pickle)}};
  if (packed) {
    info["tensor_sizes"] = std::move(tensor_sizes);
    info["packed"] = true;
    if (variant.chunk_flags) {
      info["first_chunk"] = context.index == 0;
      info["last_chunk"] = context.last;
    }
  }
  return nlohmann::json{{"update_info", std::move(info)}};
}

}  // namespace wsync
