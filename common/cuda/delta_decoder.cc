#include "common/cuda/delta_decoder.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_resources.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/delta_decode_kernels.h"
#include "common/cuda/delta_kernels.h"
#include "common/cuda/grown_buffers.h"
#include "common/cuda/kernels.h"
#include "common/dtype.h"
#include "common/status_macros.h"

namespace wsync::cuda {
namespace {

using delta::HeaderEntry;
using delta::kDecodeBlockBytes;
using delta::PlanError;
using delta::SparsePlan;
using delta::WalkStatus;

}  // namespace

struct DeltaDecoder::Arrays {
  DeviceArray entries, walk, bitmap_plans, gap_plans, block_count, block_rank, plan_count, errors,
      steps, keys, positions, scan_temp;
  PinnedArray staging;
  std::unique_ptr<KernelScratch> copy_scratch;  // the base's and the dense payloads' copies
};

DeltaDecoder::DeltaDecoder(int device) : device_(device), arrays_(std::make_unique<Arrays>()) {}

DeltaDecoder::~DeltaDecoder() {
  auto guard = DeviceGuard::Create(device_);
  arrays_.reset();
}

absl::StatusOr<std::unique_ptr<DeltaDecoder>> DeltaDecoder::Create(int device) {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  return std::unique_ptr<DeltaDecoder>(new DeltaDecoder(device));
}

absl::Status DeltaDecoder::Decode(const BucketManifest& manifest, const void* base,
                                  const void* frame, uint64_t frame_bytes, void* out,
                                  cudaStream_t stream, DeltaStats* stats) {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  const size_t count = manifest.tensors.size();
  for (const TensorEntry& t : manifest.tensors) {
    const size_t width = DTypeSize(t.dtype);
    if (width == 0 || t.length % width != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': ", t.length,
                                                     " bytes are not whole elements of ",
                                                     DTypeName(t.dtype)));
    }
    if (width != 1 && width != 2 && width != 4 && width != 8) {
      return absl::UnimplementedError(absl::StrCat("tensor '", t.name, "': elements of ", width,
                                                   " bytes (the GPU decoder takes 1, 2, 4 or 8)"));
    }
  }
  Arrays& a = *arrays_;
  const size_t entries_bytes = std::max<size_t>(count, 1) * sizeof(HeaderEntry);
  WSYNC_RETURN_IF_ERROR(a.entries.Reserve(entries_bytes));
  WSYNC_RETURN_IF_ERROR(a.walk.Reserve(sizeof(WalkStatus)));
  WSYNC_RETURN_IF_ERROR(a.staging.Reserve(entries_bytes + sizeof(WalkStatus)));

  // 1. The walk, then the headers checked here in the CPU decoder's order.
  WSYNC_CUDA_RETURN_IF_ERROR(delta::LaunchWalk(frame, frame_bytes, static_cast<uint32_t>(count),
                                               a.entries.as<HeaderEntry>(), a.walk.as<WalkStatus>(),
                                               stream));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a.staging.at(0), a.walk.as<void>(), sizeof(WalkStatus),
                                             cudaMemcpyDeviceToHost, stream));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a.staging.at(sizeof(WalkStatus)), a.entries.as<void>(),
                                             count * sizeof(HeaderEntry), cudaMemcpyDeviceToHost,
                                             stream));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  WalkStatus walk;
  std::memcpy(&walk, a.staging.at(0), sizeof(walk));
  std::vector<HeaderEntry> entries(count);
  std::memcpy(entries.data(), a.staging.at(sizeof(WalkStatus)), count * sizeof(HeaderEntry));
  if (walk.kind == delta::kWalkMagic) {
    return absl::InvalidArgumentError("not a bucket delta (it does not start with \"WSD1\")");
  }
  if (walk.kind == delta::kWalkCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("the delta names ", walk.a, " tensor(s); the bucket's manifest has ", count));
  }
  const size_t walked = walk.kind == delta::kWalkHeaderCut || walk.kind == delta::kWalkPayloadCut
                            ? walk.tensor
                            : count;
  DeltaStats totals;
  std::vector<SparsePlan> bitmaps, gaps;
  std::vector<size_t> bitmap_tensor, gap_tensor;  // each plan's tensor
  size_t bitmap_blocks = 0, gap_blocks = 0;
  uint64_t gap_entries = 0;
  for (size_t i = 0; i < walked; ++i) {
    const TensorEntry& t = manifest.tensors[i];
    const HeaderEntry& e = entries[i];
    WSYNC_RETURN_IF_ERROR(CheckDeltaCount(t, e.k));
    WSYNC_RETURN_IF_ERROR(CheckDeltaPayload(t, e.form, e.k, e.size));
    const uint64_t width = DTypeSize(t.dtype), n = t.length / width;
    const uint64_t values = e.k * width;
    SparsePlan p;
    p.out = t.offset;
    p.elements = n;
    p.k = e.k;
    p.width = static_cast<uint32_t>(width);
    if (e.form == delta::kFormBitmap) {
      const uint64_t bitmap_bytes = (n + 7) / 8;
      p.region = e.payload;
      p.region_bytes = bitmap_bytes;
      p.values = e.payload + bitmap_bytes;
      p.first_block = static_cast<uint32_t>(bitmap_blocks);
      bitmap_blocks += (bitmap_bytes + kDecodeBlockBytes - 1) / kDecodeBlockBytes;
      if (bitmap_bytes > 0) {
        bitmaps.push_back(p);
        bitmap_tensor.push_back(i);
      }
    } else if (e.form == delta::kFormGaps) {
      p.region = e.payload;
      p.region_bytes = e.size - values;
      p.values = e.payload + p.region_bytes;
      p.gap_base = gap_entries;
      p.first_block = static_cast<uint32_t>(gap_blocks);
      gap_entries += e.k;
      gap_blocks += (p.region_bytes + kDecodeBlockBytes - 1) / kDecodeBlockBytes;
      if (p.region_bytes > 0 || e.k > 0) {
        gaps.push_back(p);
        gap_tensor.push_back(i);
      }
    }
    totals.elements += n;
    totals.changed_elements += e.k;
  }
  if (walk.kind == delta::kWalkHeaderCut) {
    return RefuseDelta(manifest.tensors[walk.tensor], "the frame ends in its header");
  }
  if (walk.kind == delta::kWalkPayloadCut) {
    // As the CPU decoder: the count is checked before the payload is read.
    WSYNC_RETURN_IF_ERROR(CheckDeltaCount(manifest.tensors[walk.tensor], entries[walk.tensor].k));
    return RefuseDelta(manifest.tensors[walk.tensor],
                       absl::StrCat("a payload of ", walk.a, " bytes where ", walk.b, " are left"));
  }
  if (walk.kind == delta::kWalkTrailing) {
    return absl::InvalidArgumentError(
        absl::StrCat("the delta has ", walk.a, " byte(s) after its last tensor"));
  }

  // 2. The base where the output is elsewhere, and the dense payloads: one launch for all.
  const auto* src = static_cast<const unsigned char*>(base);
  const auto* payloads = static_cast<const unsigned char*>(frame);
  std::vector<CopyItem> copies;
  for (size_t i = 0; i < count; ++i) {
    const TensorEntry& t = manifest.tensors[i];
    if (t.length == 0) continue;
    if (entries[i].form == delta::kFormDense) {
      copies.push_back(CopyItem{payloads + entries[i].payload, t.offset, t.length});
    } else if (out != base) {
      copies.push_back(CopyItem{src + t.offset, t.offset, t.length});
    }
  }
  if (!copies.empty()) {
    if (a.copy_scratch == nullptr) {
      WSYNC_ASSIGN_OR_RETURN(a.copy_scratch, KernelScratch::Create(device_));
    }
    WSYNC_RETURN_IF_ERROR(BatchedCopy(copies, out, stream, a.copy_scratch.get()));
  }

  // 3. The sparse tensors' counts, checked against their headers before anything is applied.
  const size_t n_plans = bitmaps.size() + gaps.size();
  const size_t blocks = std::max<size_t>(bitmap_blocks + gap_blocks, 1);
  size_t sum_bytes = 0, key_bytes = 0;
  WSYNC_CUDA_RETURN_IF_ERROR(delta::ScanSum(nullptr, &sum_bytes, nullptr, nullptr, blocks, stream));
  WSYNC_CUDA_RETURN_IF_ERROR(delta::ScanSteps(nullptr, &key_bytes, nullptr, nullptr, nullptr,
                                              std::max<uint64_t>(gap_entries, 1), stream));
  for (auto [array, bytes] : std::initializer_list<std::pair<DeviceArray*, size_t>>{
           {&a.bitmap_plans, std::max<size_t>(bitmaps.size(), 1) * sizeof(SparsePlan)},
           {&a.gap_plans, std::max<size_t>(gaps.size(), 1) * sizeof(SparsePlan)},
           {&a.block_count, blocks * 8},
           {&a.block_rank, blocks * 8},
           {&a.plan_count, std::max<size_t>(n_plans, 1) * 8},
           {&a.errors, std::max<size_t>(n_plans, 1) * sizeof(PlanError)},
           {&a.steps, std::max<uint64_t>(gap_entries, 1) * 8},
           {&a.keys, std::max<uint64_t>(gap_entries, 1) * 4},
           {&a.positions, std::max<uint64_t>(gap_entries, 1) * 8},
           {&a.scan_temp, std::max(sum_bytes, key_bytes)}}) {
    WSYNC_RETURN_IF_ERROR(array->Reserve(bytes));
  }
  const size_t plans_bytes = n_plans * sizeof(SparsePlan);
  const size_t counts_at = plans_bytes, errors_at = counts_at + n_plans * 8;
  WSYNC_RETURN_IF_ERROR(a.staging.Reserve(errors_at + n_plans * sizeof(PlanError)));
  auto* bitmap_plans = a.bitmap_plans.as<SparsePlan>();
  auto* gap_plans = a.gap_plans.as<SparsePlan>();
  auto* plan_count = a.plan_count.as<unsigned long long>();
  auto* errors = a.errors.as<PlanError>();
  auto* block_count = a.block_count.as<unsigned long long>();
  auto* block_rank = a.block_rank.as<unsigned long long>();
  const auto read_back = [&]() -> absl::Status {
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a.staging.at(counts_at), plan_count, n_plans * 8,
                                               cudaMemcpyDeviceToHost, stream));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a.staging.at(errors_at), errors,
                                               n_plans * sizeof(PlanError), cudaMemcpyDeviceToHost,
                                               stream));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return absl::OkStatus();
  };
  const auto plan_error = [&](size_t plan) {
    PlanError e;
    std::memcpy(&e, a.staging.at(errors_at + plan * sizeof(PlanError)), sizeof(e));
    return e;
  };
  const auto plan_counted = [&](size_t plan) {
    unsigned long long c;
    std::memcpy(&c, a.staging.at(counts_at + plan * 8), 8);
    return static_cast<uint64_t>(c);
  };
  if (n_plans > 0) {
    std::memcpy(a.staging.at(0), bitmaps.data(), bitmaps.size() * sizeof(SparsePlan));
    std::memcpy(a.staging.at(bitmaps.size() * sizeof(SparsePlan)), gaps.data(),
                gaps.size() * sizeof(SparsePlan));
    if (!bitmaps.empty()) {
      WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(bitmap_plans, a.staging.at(0),
                                                 bitmaps.size() * sizeof(SparsePlan),
                                                 cudaMemcpyHostToDevice, stream));
    }
    if (!gaps.empty()) {
      WSYNC_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(gap_plans, a.staging.at(bitmaps.size() * sizeof(SparsePlan)),
                          gaps.size() * sizeof(SparsePlan), cudaMemcpyHostToDevice, stream));
    }
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(plan_count, 0, n_plans * 8, stream));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(errors, 0, n_plans * sizeof(PlanError), stream));
    if (bitmap_blocks > 0) {
      WSYNC_CUDA_RETURN_IF_ERROR(
          delta::LaunchBitmapCount(frame, bitmap_plans, static_cast<uint32_t>(bitmaps.size()),
                                   bitmap_blocks, block_count, plan_count, errors, stream));
    }
    if (gap_blocks > 0) {
      WSYNC_CUDA_RETURN_IF_ERROR(
          delta::LaunchVarintCount(frame, gap_plans, static_cast<uint32_t>(gaps.size()), gap_blocks,
                                   block_count + bitmap_blocks, plan_count + bitmaps.size(),
                                   errors + bitmaps.size(), stream));
    }
    WSYNC_RETURN_IF_ERROR(read_back());
    // In tensor order, as the CPU decoder meets them.
    std::vector<std::pair<size_t, absl::Status>> refused;
    for (size_t b = 0; b < bitmaps.size(); ++b) {
      const TensorEntry& t = manifest.tensors[bitmap_tensor[b]];
      const PlanError e = plan_error(b);
      const uint64_t seen = plan_counted(b), k = bitmaps[b].k;
      if (e.kind == delta::kErrorBitPastEnd) {
        refused.emplace_back(
            bitmap_tensor[b],
            RefuseDelta(t, absl::StrCat("the bitmap marks element ", e.a, " of ", e.b)));
      } else if (seen > k) {
        refused.emplace_back(
            bitmap_tensor[b],
            RefuseDelta(t, absl::StrCat("the bitmap marks more than ", k, " elements")));
      } else if (seen < k) {
        refused.emplace_back(
            bitmap_tensor[b],
            RefuseDelta(t, absl::StrCat("the bitmap marks ", seen, " elements, not ", k)));
      }
    }
    for (size_t g = 0; g < gaps.size(); ++g) {
      const size_t plan = bitmaps.size() + g;
      const TensorEntry& t = manifest.tensors[gap_tensor[g]];
      const uint64_t ends = plan_counted(plan), k = gaps[g].k;
      const bool cut = plan_error(plan).kind == delta::kErrorLastVarintCut;
      if (ends < k) {
        refused.emplace_back(gap_tensor[g],
                             RefuseDelta(t, absl::StrCat("position ", ends, " is cut")));
      } else if (ends > k || cut) {
        refused.emplace_back(gap_tensor[g],
                             RefuseDelta(t, absl::StrCat("byte(s) after the ", k, " positions")));
      }
    }
    if (!refused.empty()) {
      return std::min_element(refused.begin(), refused.end(),
                              [](const auto& x, const auto& y) { return x.first < y.first; })
          ->second;
    }

    // 4. Applied: each bitmap's values by rank; each position decoded, summed, its value put.
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(errors, 0, n_plans * sizeof(PlanError), stream));
    size_t temp = sum_bytes;
    WSYNC_CUDA_RETURN_IF_ERROR(delta::ScanSum(a.scan_temp.as<void>(), &temp, block_count,
                                              block_rank, bitmap_blocks + gap_blocks, stream));
    if (bitmap_blocks > 0) {
      WSYNC_CUDA_RETURN_IF_ERROR(
          delta::LaunchBitmapScatter(frame, bitmap_plans, static_cast<uint32_t>(bitmaps.size()),
                                     bitmap_blocks, block_rank, out, stream));
    }
    if (gap_entries > 0) {
      // The gap kernels see their blocks from 0: their ranks start after the bitmaps'.
      WSYNC_CUDA_RETURN_IF_ERROR(delta::LaunchVarintDecode(
          frame, gap_plans, static_cast<uint32_t>(gaps.size()), gap_blocks,
          block_rank + bitmap_blocks, a.steps.as<unsigned long long>(), a.keys.as<uint32_t>(),
          errors + bitmaps.size(), stream));
      temp = key_bytes;
      WSYNC_CUDA_RETURN_IF_ERROR(delta::ScanSteps(
          a.scan_temp.as<void>(), &temp, a.keys.as<uint32_t>(), a.steps.as<unsigned long long>(),
          a.positions.as<unsigned long long>(), gap_entries, stream));
      WSYNC_CUDA_RETURN_IF_ERROR(delta::LaunchGapScatter(
          frame, gap_plans, a.keys.as<uint32_t>(), a.positions.as<unsigned long long>(),
          gap_entries, out, errors + bitmaps.size(), stream));
    }
    WSYNC_RETURN_IF_ERROR(read_back());
    for (size_t g = 0; g < gaps.size(); ++g) {
      const PlanError e = plan_error(bitmaps.size() + g);
      const TensorEntry& t = manifest.tensors[gap_tensor[g]];
      if (e.kind == delta::kErrorVarintTooLong) {
        return RefuseDelta(t, absl::StrCat("position ", e.a, " is cut"));
      }
      if (e.kind == delta::kErrorPositionPastEnd) {
        return RefuseDelta(t, absl::StrCat("position ", e.a, " lies past element ", e.b));
      }
    }
  } else {
    WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  totals.dense_bytes = manifest.span_bytes();
  totals.frame_bytes = frame_bytes;
  if (stats != nullptr) *stats = totals;
  return absl::OkStatus();
}

}  // namespace wsync::cuda
