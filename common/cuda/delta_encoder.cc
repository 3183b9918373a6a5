#include "common/cuda/delta_encoder.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_resources.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/delta_kernels.h"
#include "common/cuda/grown_buffers.h"
#include "common/dtype.h"
#include "common/status_macros.h"

namespace wsync::cuda {
namespace {

using delta::kChunkBytes;
using delta::kHeaderBytes;
using delta::kPrefixBytes;
using delta::TensorPlan;
static_assert(delta::kFormDense == static_cast<uint32_t>(DeltaForm::kDense) &&
              delta::kFormBitmap == static_cast<uint32_t>(DeltaForm::kBitmap) &&
              delta::kFormGaps == static_cast<uint32_t>(DeltaForm::kGaps));

void PutLittle(std::vector<unsigned char>* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<unsigned char>(v >> (8 * i)));
}

}  // namespace

struct DeltaEncoder::Arrays {
  DeviceArray tensors, masks, chunk_count, chunk_last, chunk_prev, chunk_bytes, chunk_rank,
      chunk_offset, tensor_k, tensor_bytes, blob, scan_temp;
  std::unique_ptr<TimingEvent> compare_started, compare_ended;  // around pass 1
  PinnedArray staging;  // the plan, then the counts, the positions' bytes, the headers
};

DeltaEncoder::DeltaEncoder(int device) : device_(device), arrays_(std::make_unique<Arrays>()) {}

DeltaEncoder::~DeltaEncoder() {
  auto guard = DeviceGuard::Create(device_);
  arrays_.reset();
}

absl::StatusOr<std::unique_ptr<DeltaEncoder>> DeltaEncoder::Create(int device) {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device));
  return std::unique_ptr<DeltaEncoder>(new DeltaEncoder(device));
}

absl::StatusOr<uint64_t> DeltaEncoder::Encode(const BucketManifest& manifest, const void* base,
                                              const void* next, void* frame, uint64_t capacity,
                                              cudaStream_t stream, DeltaStats* stats,
                                              uint64_t limit) {
  WSYNC_ASSIGN_OR_RETURN(DeviceGuard guard, DeviceGuard::Create(device_));
  const auto started = std::chrono::steady_clock::now();
  const auto since = [&started] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  phases_ = Phases{};
  const size_t count = manifest.tensors.size();
  std::vector<TensorPlan> tensors(count);
  size_t n_chunks = 0;
  DeltaStats totals;
  totals.dense_bytes = manifest.span_bytes();
  for (size_t i = 0; i < count; ++i) {
    const TensorEntry& e = manifest.tensors[i];
    const size_t width = DTypeSize(e.dtype);
    if (width == 0 || e.length % width != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "': ", e.length,
                                                     " bytes are not whole elements of ",
                                                     DTypeName(e.dtype)));
    }
    if (width != 1 && width != 2 && width != 4 && width != 8) {
      return absl::UnimplementedError(absl::StrCat("tensor '", e.name, "': elements of ", width,
                                                   " bytes (the GPU encoder takes 1, 2, 4 or 8)"));
    }
    TensorPlan& t = tensors[i];
    t.offset = e.offset;
    t.length = e.length;
    t.width = static_cast<uint32_t>(width);
    t.bitmap_bytes = (e.length / width + 7) / 8;
    t.first_chunk = static_cast<uint32_t>(n_chunks);
    n_chunks += (e.length + kChunkBytes - 1) / kChunkBytes;
    totals.elements += e.length / width;
  }
  if (n_chunks >= UINT32_MAX) {
    return absl::UnimplementedError(absl::StrCat("a bucket of ", manifest.span_bytes(),
                                                 " bytes (the GPU encoder takes under 64 TiB)"));
  }
  Arrays& a = *arrays_;
  const size_t words = std::max<size_t>(n_chunks, 1);
  size_t scan_bytes = 0, max_scan_bytes = 0;
  WSYNC_CUDA_RETURN_IF_ERROR(delta::ScanSum(nullptr, &scan_bytes, nullptr, nullptr, words, stream));
  WSYNC_CUDA_RETURN_IF_ERROR(
      delta::ScanPrevious(nullptr, &max_scan_bytes, nullptr, nullptr, words, stream));
  for (auto [array, bytes] : std::initializer_list<std::pair<DeviceArray*, size_t>>{
           {&a.tensors, std::max<size_t>(count, 1) * sizeof(TensorPlan)},
           {&a.masks, words * delta::kGroupsPerChunk * sizeof(uint64_t)},
           {&a.chunk_count, words * 8},
           {&a.chunk_last, words * 8},
           {&a.chunk_prev, words * 8},
           {&a.chunk_bytes, words * 8},
           {&a.chunk_rank, words * 8},
           {&a.chunk_offset, words * 8},
           {&a.tensor_k, std::max<size_t>(count, 1) * 8},
           {&a.tensor_bytes, std::max<size_t>(count, 1) * 8},
           {&a.blob, kPrefixBytes + kHeaderBytes * count},
           {&a.scan_temp, std::max(scan_bytes, max_scan_bytes)}}) {
    WSYNC_RETURN_IF_ERROR(array->Reserve(bytes));
  }
  // Pinned staging: the plan, the counts, the positions' bytes, the headers. Each is rewritten
  // only after the stream has synchronised past the copy that read it.
  const size_t plan_at = 0, k_at = count * sizeof(TensorPlan), bytes_at = k_at + count * 8,
               blob_at = bytes_at + count * 8;
  WSYNC_RETURN_IF_ERROR(a.staging.Reserve(blob_at + kPrefixBytes + kHeaderBytes * count));
  const auto upload_tensors = [&]() -> absl::Status {
    if (count == 0) return absl::OkStatus();
    std::memcpy(a.staging.at(plan_at), tensors.data(), count * sizeof(TensorPlan));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a.tensors.as<TensorPlan>(), a.staging.at(plan_at),
                                               count * sizeof(TensorPlan), cudaMemcpyHostToDevice,
                                               stream));
    return absl::OkStatus();
  };
  WSYNC_RETURN_IF_ERROR(upload_tensors());
  std::vector<uint64_t> k(count, 0), position_bytes(count, 0);
  if (n_chunks > 0) {
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.tensor_k.as<void>(), 0, count * 8, stream));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.tensor_bytes.as<void>(), 0, count * 8, stream));
    if (a.compare_started == nullptr) {
      WSYNC_ASSIGN_OR_RETURN(a.compare_started, TimingEvent::Create(device_));
      WSYNC_ASSIGN_OR_RETURN(a.compare_ended, TimingEvent::Create(device_));
    }
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(a.compare_started->get(), stream));
    WSYNC_CUDA_RETURN_IF_ERROR(delta::LaunchCompare(
        base, next, a.tensors.as<TensorPlan>(), static_cast<uint32_t>(count), n_chunks,
        a.masks.as<uint64_t>(), a.chunk_count.as<unsigned long long>(),
        a.chunk_last.as<unsigned long long>(), a.tensor_k.as<unsigned long long>(), stream));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaEventRecord(a.compare_ended->get(), stream));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a.staging.at(k_at), a.tensor_k.as<void>(), count * 8,
                                               cudaMemcpyDeviceToHost, stream));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    std::memcpy(k.data(), a.staging.at(k_at), count * 8);
  }
  phases_.counted = since();
  if (n_chunks > 0) {
    float ms = 0;
    WSYNC_CUDA_RETURN_IF_ERROR(
        cudaEventElapsedTime(&ms, a.compare_started->get(), a.compare_ended->get()));
    phases_.compare_kernel = ms / 1e3;
  }
  // As the CPU codec: the count decides between dense and a bitmap; every position takes a byte
  // at least, so the frame's least size is known now, and positions are sized only where they
  // may be the smallest form.
  uint64_t least = kPrefixBytes + kHeaderBytes * count;
  bool any_gaps = false;
  for (size_t i = 0; i < count; ++i) {
    TensorPlan& t = tensors[i];
    const uint64_t values = k[i] * t.width;
    const uint64_t smaller = std::min(t.length, t.bitmap_bytes + values);
    least += std::min(smaller, k[i] + values);
    t.gap_candidate = k[i] + values < smaller ? 1 : 0;
    any_gaps = any_gaps || t.gap_candidate != 0;
    totals.changed_elements += k[i];
  }
  if (least >= limit) {
    if (stats != nullptr) *stats = totals;
    return absl::ResourceExhaustedError(
        absl::StrCat("the delta would take at least ", least, " bytes, the limit is ", limit));
  }
  if (any_gaps) {
    WSYNC_RETURN_IF_ERROR(upload_tensors());
    size_t temp_bytes = max_scan_bytes;
    WSYNC_CUDA_RETURN_IF_ERROR(delta::ScanPrevious(
        a.scan_temp.as<void>(), &temp_bytes, a.chunk_last.as<unsigned long long>(),
        a.chunk_prev.as<unsigned long long>(), n_chunks, stream));
    WSYNC_CUDA_RETURN_IF_ERROR(delta::LaunchPositionBytes(
        a.tensors.as<TensorPlan>(), static_cast<uint32_t>(count), n_chunks, a.masks.as<uint64_t>(),
        a.chunk_prev.as<unsigned long long>(), a.chunk_bytes.as<unsigned long long>(),
        a.tensor_bytes.as<unsigned long long>(), stream));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a.staging.at(bytes_at), a.tensor_bytes.as<void>(),
                                               count * 8, cudaMemcpyDeviceToHost, stream));
    WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    std::memcpy(position_bytes.data(), a.staging.at(bytes_at), count * 8);
  }
  phases_.sized = since();
  // The forms, as the CPU codec picks them (ties: dense, then bitmap), and the frame's layout.
  std::vector<unsigned char> blob;
  blob.reserve(kPrefixBytes + kHeaderBytes * count);
  blob.insert(blob.end(), kDeltaMagic.begin(), kDeltaMagic.end());
  PutLittle(&blob, count, 4);
  uint64_t at = kPrefixBytes;
  for (size_t i = 0; i < count; ++i) {
    TensorPlan& t = tensors[i];
    const uint64_t values = k[i] * t.width;
    DeltaForm form = DeltaForm::kDense;
    uint64_t size = t.length;
    if (t.bitmap_bytes + values < size) {
      form = DeltaForm::kBitmap;
      size = t.bitmap_bytes + values;
    }
    if (t.gap_candidate && position_bytes[i] + values < size) {
      form = DeltaForm::kGaps;
      size = position_bytes[i] + values;
    }
    t.form = static_cast<uint32_t>(form);
    t.payload = at + kHeaderBytes;
    t.values = t.payload + size - values;
    at = t.payload + size;
    blob.push_back(static_cast<unsigned char>(form));
    PutLittle(&blob, k[i], 8);
    PutLittle(&blob, size, 8);
  }
  if (at > capacity) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the delta takes ", at, " bytes; its buffer holds ", capacity));
  }
  WSYNC_RETURN_IF_ERROR(upload_tensors());
  std::memcpy(a.staging.at(blob_at), blob.data(), blob.size());
  WSYNC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(a.blob.as<void>(), a.staging.at(blob_at), blob.size(),
                                             cudaMemcpyHostToDevice, stream));
  if (n_chunks > 0) {
    size_t temp_bytes = scan_bytes;
    WSYNC_CUDA_RETURN_IF_ERROR(
        delta::ScanSum(a.scan_temp.as<void>(), &temp_bytes, a.chunk_count.as<unsigned long long>(),
                       a.chunk_rank.as<unsigned long long>(), n_chunks, stream));
    if (any_gaps) {
      temp_bytes = scan_bytes;
      WSYNC_CUDA_RETURN_IF_ERROR(delta::ScanSum(
          a.scan_temp.as<void>(), &temp_bytes, a.chunk_bytes.as<unsigned long long>(),
          a.chunk_offset.as<unsigned long long>(), n_chunks, stream));
    }
    WSYNC_CUDA_RETURN_IF_ERROR(
        delta::LaunchWrite(next, a.tensors.as<TensorPlan>(), static_cast<uint32_t>(count), n_chunks,
                           a.masks.as<uint64_t>(), a.chunk_prev.as<unsigned long long>(),
                           a.chunk_rank.as<unsigned long long>(),
                           a.chunk_offset.as<unsigned long long>(), frame, stream));
  }
  WSYNC_CUDA_RETURN_IF_ERROR(delta::LaunchHeaders(a.blob.as<void>(), a.tensors.as<TensorPlan>(),
                                                  static_cast<uint32_t>(count), frame, stream));
  WSYNC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  phases_.written = since();
  totals.frame_bytes = at;
  if (stats != nullptr) *stats = totals;
  return at;
}

}  // namespace wsync::cuda
