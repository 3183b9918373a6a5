// Fuzzes the torch CUDA-IPC pickles wsyncd writes for engines (common/torch_ipc/torch_ipc_pickle.h
// and each engine's daemon/engines/<kind>/<kind>_ipc_pickle.h): random tensor descriptions,
// flattened-bucket metadata and checkpoint-engine entries, through every payload function and the
// single-tensor pieces.
//
// Input (FuzzedDataProvider): which payload, then its tensors. Each tensor's fields are mostly
// sound (a known dtype, a storage that fits the view, 64-byte handles) and otherwise anything:
// unknown dtypes, negative and huge dims, misaligned or overflowing offsets and storages, handles
// of other lengths, names and GPU UUIDs that are ASCII, ASCII with a byte that is never UTF-8,
// or raw bytes. Metadata ranges mostly follow each other and mostly match their shapes.
//
// Invariants: a refusal is InvalidArgument with a message (never Internal, which would mean an
// attempt at a GLOBAL outside the allowed set); a description this file judges sound on its own
// reading of docs/engines/torch-ipc.md (in 128-bit arithmetic) is written, and one it judges
// unsound is refused; what is written passes the structural checker of tests/pickle (every
// opcode known, MARKs matched, REDUCE/NEWOBJ/BUILD given what they take, CPython's own int and
// bytes forms, only allowed GLOBALs, STOP with one object) with the payload's kind on top.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/torch_ipc/pickle_writer.h"
#include "common/torch_ipc/torch_ipc_pickle.h"
#include "daemon/engines/lmdeploy/lmdeploy_ipc_pickle.h"
#include "daemon/engines/sglang/sglang_ipc_pickle.h"
#include "daemon/engines/vllm/vllm_ipc_pickle.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/pickle/pickle_checker.h"

namespace wsync {
namespace {

using int128 = __int128;
constexpr int128 kMaxInt64 = INT64_MAX;

// What this file expects of a description: written, refused, or either (text whose UTF-8
// validity the input left open).
enum class Verdict { kSound, kUnsound, kEither };

Verdict operator&(Verdict a, Verdict b) {
  if (a == Verdict::kUnsound || b == Verdict::kUnsound) return Verdict::kUnsound;
  if (a == Verdict::kEither || b == Verdict::kEither) return Verdict::kEither;
  return Verdict::kSound;
}
Verdict If(bool sound) { return sound ? Verdict::kSound : Verdict::kUnsound; }

struct DtypeSize {
  const char* name;
  int size;
};
constexpr DtypeSize kDtypes[] = {{"bool", 1},    {"uint8", 1},         {"int8", 1},
                                 {"int16", 2},   {"int32", 4},         {"int64", 8},
                                 {"float16", 2}, {"bfloat16", 2},      {"float32", 4},
                                 {"float64", 8}, {"float8_e4m3fn", 1}, {"float8_e5m2", 1}};

int ItemSize(const std::string& dtype) {  // 0: not a dtype wsync knows
  for (const DtypeSize& d : kDtypes) {
    if (dtype == d.name) return d.size;
  }
  return 0;
}

// Printable ASCII, the same with a byte that is never UTF-8, or raw bytes.
std::string Text(FuzzedDataProvider& in, size_t max, Verdict* verdict) {
  std::string s = in.ConsumeRandomLengthString(max);
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
      *verdict = Verdict::kEither;
      return s;
    case 1:
      *verdict = Verdict::kUnsound;
      return s + "\xff";
    default:
      for (char& c : s) c = static_cast<char>(' ' + static_cast<unsigned char>(c) % 95);
      *verdict = Verdict::kSound;
      return s;
  }
}

// Text that must also be non-empty (tensor names, dict keys).
std::string Name(FuzzedDataProvider& in, Verdict* verdict) {
  std::string s = Text(in, 24, verdict);
  if (s.empty()) *verdict = Verdict::kUnsound;
  return s;
}

std::string Dtype(FuzzedDataProvider& in) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) return in.ConsumeRandomLengthString(16);
  return in.PickValueInArray(kDtypes).name;
}

std::vector<int64_t> Shape(FuzzedDataProvider& in, bool one_dim) {
  const int rank = one_dim && in.ConsumeIntegralInRange<int>(0, 7) != 0
                       ? 1
                       : in.ConsumeIntegralInRange<int>(0, 5);
  std::vector<int64_t> shape(rank);
  for (int64_t& d : shape) {
    d = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? in.ConsumeIntegral<int64_t>()
                                                   : in.ConsumeIntegralInRange<int64_t>(0, 40);
  }
  return shape;
}

// Whether torch can hold the shape (dims >= 0 and the product of the dims, zeros counted as 1 as
// the strides need them, within int64), and its element count.
bool ShapeSound(const std::vector<int64_t>& shape, int128* numel) {
  int128 all = 1;
  *numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    all *= d == 0 ? 1 : d;
    *numel *= d;
    if (all > kMaxInt64) return false;
  }
  return true;
}

// Mostly `fit` or a few bytes off it, else anything.
uint64_t NearOrAny(FuzzedDataProvider& in, int128 fit) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return in.ConsumeIntegral<uint64_t>();
    case 1:
      return in.ConsumeIntegralInRange<uint64_t>(0, 4096);
    case 2: {
      const int128 v = fit + in.ConsumeIntegralInRange<int>(-3, 3);
      return v < 0 || v > UINT64_MAX ? 0 : static_cast<uint64_t>(v);
    }
    default:
      return fit < 0 || fit > UINT64_MAX ? 0 : static_cast<uint64_t>(fit);
  }
}

std::string HandleBytes(FuzzedDataProvider& in) {
  const size_t n = in.ConsumeIntegralInRange<int>(0, 15) == 0
                       ? in.ConsumeIntegralInRange<size_t>(0, 80)
                       : kCudaIpcHandleBytes;
  std::string h = in.ConsumeBytesAsString(n);
  h.resize(n, '\x5a');
  return h;
}

struct FuzzTensor {
  CudaIpcTensor tensor;
  Verdict device_text = Verdict::kSound;  // a UUID's UTF-8 verdict

  // The tensor rules of §6.1 as this file reads them.
  Verdict Judge() const {
    const CudaIpcTensor& t = tensor;
    Verdict device = device_text;
    if (const int* index = std::get_if<int>(&t.device)) {
      device = If(*index >= 0);
    } else if (std::get<std::string>(t.device).empty()) {
      device = Verdict::kUnsound;
    }
    const int item = ItemSize(t.dtype);
    int128 numel;
    const bool sound = item != 0 && ShapeSound(t.shape, &numel) &&
                       t.ipc_handle.size() == kCudaIpcHandleBytes &&
                       t.event_handle.size() == kCudaIpcHandleBytes &&
                       t.storage_size_bytes <= kMaxInt64 && t.storage_offset_bytes <= kMaxInt64 &&
                       t.storage_size_bytes % item == 0 && t.storage_offset_bytes % item == 0 &&
                       (int128{t.element_offset} + numel) * item <= int128{t.storage_size_bytes};
    return If(sound) & device;
  }

  bool OneDim() const { return tensor.shape.size() == 1; }
};

FuzzTensor ReadTensor(FuzzedDataProvider& in, bool one_dim = false) {
  FuzzTensor f;
  CudaIpcTensor& t = f.tensor;
  t.dtype = Dtype(in);
  t.shape = Shape(in, one_dim);
  t.element_offset = in.ConsumeIntegralInRange<int>(0, 7) == 0
                         ? in.ConsumeIntegral<uint64_t>()
                         : in.ConsumeIntegralInRange<uint64_t>(0, 64);
  const int item = ItemSize(t.dtype) ? ItemSize(t.dtype) : 1;
  int128 numel;
  if (!ShapeSound(t.shape, &numel)) numel = 0;
  t.storage_size_bytes = NearOrAny(in, (int128{t.element_offset} + numel) * item);
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) t.storage_offset_bytes = NearOrAny(in, 4 * item);
  t.ipc_handle = HandleBytes(in);
  t.event_handle = HandleBytes(in);
  t.event_sync_required = in.ConsumeBool();
  t.ref_counter_name = in.ConsumeRandomLengthString(300);
  if (in.ConsumeBool()) {
    t.device = in.ConsumeBool() ? in.ConsumeIntegral<int>() : in.ConsumeIntegralInRange<int>(0, 7);
  } else {
    t.device = Text(in, 40, &f.device_text);
  }
  return f;
}

// ---- Flattened buckets ------------------------------------------------------------------------

struct FuzzMetadata {
  FlattenedTensorMetadata m;
  Verdict name = Verdict::kSound;
  int item = 0;
  int128 shape_numel = 0;

  // What holds for any entry: a name, a known dtype, a sound shape, end - start == numel.
  Verdict Judge() const {
    return name & If(item != 0 && m.end_idx >= m.start_idx && m.end_idx - m.start_idx == m.numel);
  }
};

// An entry of a bucket of `flat_dtype` whose ranges are counted in bytes or in elements.
FuzzMetadata ReadMetadata(FuzzedDataProvider& in, const std::string& flat_dtype, bool bytes,
                          uint64_t* next) {
  FuzzMetadata f;
  f.m.name = Name(in, &f.name);
  f.m.dtype = in.ConsumeBool() ? flat_dtype : Dtype(in);
  f.m.shape = Shape(in, false);
  f.item = ItemSize(f.m.dtype);
  if (!ShapeSound(f.m.shape, &f.shape_numel)) f.item = 0;  // judged unsound either way
  const int128 units = f.shape_numel * (bytes && f.item ? f.item : 1);
  f.m.numel = NearOrAny(in, units);
  f.m.start_idx = NearOrAny(in, *next);
  f.m.end_idx = NearOrAny(in, int128{f.m.start_idx} + f.m.numel);
  *next = f.m.end_idx;
  return f;
}

std::vector<FuzzMetadata> ReadMetadataList(FuzzedDataProvider& in, const std::string& flat_dtype,
                                           bool bytes) {
  std::vector<FuzzMetadata> list(in.ConsumeIntegralInRange<int>(0, 6));
  uint64_t next = 0;
  for (FuzzMetadata& f : list) f = ReadMetadata(in, flat_dtype, bytes, &next);
  return list;
}

std::vector<FlattenedTensorMetadata> Entries(const std::vector<FuzzMetadata>& list) {
  std::vector<FlattenedTensorMetadata> out;
  for (const FuzzMetadata& f : list) out.push_back(f.m);
  return out;
}

// SGLang: flat[start:end] viewed as the entry's dtype; same dtype counts elements, a uint8
// bucket counts bytes and each range must start on its dtype's boundary, in the storage and in
// the allocation.
Verdict JudgeSglangBucket(const FuzzTensor& flat, const std::vector<FuzzMetadata>& list) {
  Verdict v = flat.Judge() & If(flat.OneDim());
  if (v == Verdict::kUnsound) return v;
  const CudaIpcTensor& t = flat.tensor;
  for (const FuzzMetadata& f : list) {
    v = v & f.Judge();
    if (f.item == 0) continue;
    const FlattenedTensorMetadata& m = f.m;
    v = v & If(int128{m.end_idx} <= t.shape[0]);
    if (m.dtype == t.dtype) {
      v = v & If(m.numel == f.shape_numel);
    } else if (t.dtype == "uint8") {
      v = v & If(int128{m.numel} == f.shape_numel * f.item &&
                 (int128{t.element_offset} + m.start_idx) % f.item == 0 &&
                 (int128{t.storage_offset_bytes} + t.element_offset + m.start_idx) % f.item == 0);
    } else {
      v = Verdict::kUnsound;
    }
  }
  return v;
}

// LMDeploy: flat[start:end].reshape(shape) in elements, the bucket's dtype only, and a call that
// carries the tensor carries metadata.
Verdict JudgeLmdeployBucket(const LmdeployFlattenedBucket& bucket, const FuzzTensor* flat,
                            const std::vector<FuzzMetadata>& list) {
  Verdict v = If(bucket.event_ipc_handle.size() == kCudaIpcHandleBytes);
  if (flat != nullptr) v = v & flat->Judge() & If(flat->OneDim() && !list.empty());
  if (v == Verdict::kUnsound) return v;
  for (const FuzzMetadata& f : list) {
    v = v & f.Judge();
    if (f.item == 0) continue;
    v = v & If(f.m.numel == f.shape_numel);
    if (flat != nullptr) {
      v = v & If(int128{f.m.end_idx} <= flat->tensor.shape[0] && f.m.dtype == flat->tensor.dtype);
    }
  }
  return v;
}

// ---- Lists keyed by names or GPUs ---------------------------------------------------------------

std::vector<NamedCudaTensor> ReadNamed(FuzzedDataProvider& in, Verdict* v) {
  std::vector<NamedCudaTensor> list(in.ConsumeIntegralInRange<int>(0, 4));
  *v = Verdict::kSound;
  for (NamedCudaTensor& n : list) {
    Verdict name;
    n.name = Name(in, &name);
    const FuzzTensor t = ReadTensor(in);
    n.tensor = t.tensor;
    *v = *v & name & t.Judge();
  }
  return list;
}

// One dict {uuid: tensor}: at least one GPU, each UUID non-empty and once.
std::vector<TensorOnGpu> ReadGpus(FuzzedDataProvider& in, bool uint8_buffers, Verdict* v) {
  std::vector<TensorOnGpu> gpus(in.ConsumeIntegralInRange<int>(0, 3));
  *v = If(!gpus.empty());
  std::set<std::string> seen;
  for (TensorOnGpu& g : gpus) {
    Verdict key;
    if (in.ConsumeBool()) {
      g.gpu_uuid = in.ConsumeBool() ? "GPU-a" : "GPU-b";  // repeats are refused
      key = Verdict::kSound;
    } else {
      g.gpu_uuid = Name(in, &key);
    }
    *v = *v & key & If(seen.insert(g.gpu_uuid).second);
    const FuzzTensor t = ReadTensor(in, uint8_buffers);
    g.tensor = t.tensor;
    *v = *v & t.Judge();
    if (uint8_buffers) *v = *v & If(t.OneDim() && t.tensor.dtype == "uint8");
  }
  return gpus;
}

// ---- Checking a result --------------------------------------------------------------------------

void Check(const absl::StatusOr<std::string>& result, Verdict verdict, const char* top,
           const char* payload) {
  if (!result.ok()) {
    FUZZ_CHECK(result.status().code() == absl::StatusCode::kInvalidArgument,
               absl::StrCat(payload, ": ", result.status().ToString()));
    FUZZ_CHECK(!result.status().message().empty(), payload);
    FUZZ_CHECK(
        verdict != Verdict::kSound,
        absl::StrCat(payload, ": a sound description refused: ", result.status().ToString()));
    return;
  }
  FUZZ_CHECK(verdict != Verdict::kUnsound,
             absl::StrCat(payload, ": an unsound description written"));
  const auto checked = CheckTorchIpcPickle(*result);
  FUZZ_CHECK(checked.ok(), absl::StrCat(payload, ": ", checked.status().ToString()));
  FUZZ_CHECK(checked->top_kind == top, absl::StrCat(payload, ": ", checked->top_kind, " on top"));
}

// A piece written onto a fresh writer, then finished, so it can be checked as a whole pickle.
template <typename Write>
absl::StatusOr<std::string> Piece(Write write) {
  PickleWriter out;
  const absl::Status s = write(&out);
  if (!s.ok()) return s;
  return std::move(out).Finish();
}

enum Payload {
  kReduced,
  kPair,
  kArgs,
  kMetadata,
  kSglangNull,
  kSglangFlattened,
  kVllmFuncArgs,
  kVllmArgs,
  kVllmPacked,
  kLmdeployNull,
  kLmdeployFlattened,
  kCheckpointBuffer,
  kCheckpointBucket,
  kCheckpointAbort,
  kPayloadCount,
};

void FuzzOne(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, kPayloadCount - 1)) {
    case kReduced: {
      const FuzzTensor t = ReadTensor(in);
      Check(Piece([&](PickleWriter* w) { return WriteReducedTensor(t.tensor, w); }), t.Judge(),
            "object", "reduced tensor");
      return;
    }
    case kPair: {
      const FuzzTensor t = ReadTensor(in);
      Check(Piece([&](PickleWriter* w) { return WriteRebuildPair(t.tensor, w); }), t.Judge(),
            "tuple", "(func, args)");
      return;
    }
    case kArgs: {
      const FuzzTensor t = ReadTensor(in);
      Check(Piece([&](PickleWriter* w) { return WriteRebuildArgs(t.tensor, w); }), t.Judge(),
            "tuple", "args");
      return;
    }
    case kMetadata: {
      uint64_t next = 0;
      const std::string flat_dtype = Dtype(in);
      const bool bytes = in.ConsumeBool();
      const FuzzMetadata f = ReadMetadata(in, flat_dtype, bytes, &next);
      const absl::string_view module =
          in.ConsumeBool() ? kSglangMetadataModule : kLmdeployMetadataModule;
      Check(Piece([&](PickleWriter* w) { return WriteFlattenedTensorMetadata(f.m, module, w); }),
            f.Judge(), "new object", "metadata");
      return;
    }
    case kSglangNull:
    case kLmdeployNull: {
      Verdict v;
      const std::vector<NamedCudaTensor> list = ReadNamed(in, &v);
      const bool sglang = in.ConsumeBool();
      Check(sglang ? SglangNamedTensorsPickle(list) : LmdeployNamedTensorsPickle(list), v, "list",
            sglang ? "sglang null" : "lmdeploy null");
      return;
    }
    case kSglangFlattened: {
      const FuzzTensor flat = ReadTensor(in, /*one_dim=*/true);
      const std::vector<FuzzMetadata> list =
          ReadMetadataList(in, flat.tensor.dtype, flat.tensor.dtype == "uint8");
      Check(SglangFlattenedBucketPickle(flat.tensor, Entries(list)), JudgeSglangBucket(flat, list),
            "dict", "sglang flattened_bucket");
      return;
    }
    case kVllmFuncArgs:
    case kVllmArgs: {
      std::vector<std::vector<TensorOnGpu>> names(in.ConsumeIntegralInRange<int>(0, 3));
      Verdict v = Verdict::kSound;
      for (std::vector<TensorOnGpu>& gpus : names) {
        Verdict one;
        gpus = ReadGpus(in, false, &one);
        v = v & one;
      }
      const VllmEntryForm form =
          in.ConsumeBool() ? VllmEntryForm::kFuncArgs : VllmEntryForm::kArgsOnly;
      Check(VllmIpcHandlesPickle(names, form), v, "list", "vllm ipc_handles");
      return;
    }
    case kVllmPacked: {
      Verdict v;
      const std::vector<TensorOnGpu> chunk = ReadGpus(in, true, &v);
      Check(VllmPackedIpcHandlesPickle(chunk), v, "dict", "vllm packed");
      return;
    }
    case kLmdeployFlattened: {
      LmdeployFlattenedBucket bucket;
      std::optional<FuzzTensor> flat;
      if (in.ConsumeBool()) {
        flat = ReadTensor(in, /*one_dim=*/true);
        bucket.flattened_tensor = flat->tensor;
      }
      const std::string flat_dtype = flat ? flat->tensor.dtype : Dtype(in);
      const std::vector<FuzzMetadata> list = ReadMetadataList(in, flat_dtype, /*bytes=*/false);
      bucket.metadata = Entries(list);
      bucket.event_ipc_handle = HandleBytes(in);
      Check(LmdeployFlattenedBucketPickle(bucket),
            JudgeLmdeployBucket(bucket, flat ? &*flat : nullptr, list), "dict",
            "lmdeploy flattened_bucket");
      return;
    }
    case kCheckpointBuffer: {
      const FuzzTensor t = ReadTensor(in, /*one_dim=*/true);
      Check(CheckpointEngineBufferFrame(t.tensor),
            t.Judge() & If(t.OneDim() && t.tensor.dtype == "uint8"), "tuple",
            "checkpoint-engine buffer");
      return;
    }
    case kCheckpointBucket: {
      std::vector<CheckpointEngineTensor> tensors(in.ConsumeIntegralInRange<int>(0, 6));
      Verdict v = Verdict::kSound;
      int128 next = 0;
      std::vector<int128> ends;
      for (CheckpointEngineTensor& t : tensors) {
        Verdict name;
        t.name = Name(in, &name);
        t.dtype = Dtype(in);
        t.shape = Shape(in, false);
        const int item = ItemSize(t.dtype);
        int128 numel;
        const bool shape_sound = ShapeSound(t.shape, &numel);
        t.offset = NearOrAny(in, next);
        next = int128{t.offset} + (shape_sound ? numel : 0) * (item ? item : 1);
        ends.push_back(next);
        v = v & name & If(item != 0 && shape_sound && t.offset % item == 0);
      }
      const uint64_t buffer_bytes = NearOrAny(in, next);
      for (int128 end : ends) v = v & If(end <= int128{buffer_bytes});
      Check(CheckpointEngineBucketFrame(tensors, buffer_bytes), v, "list",
            "checkpoint-engine bucket");
      return;
    }
    case kCheckpointAbort: {
      // Outside the allow-list checker (a plain unpickler reads it): checked by layout. Any
      // reason gives RuntimeError(prefix + at most 512 printable ASCII bytes).
      const std::string reason = in.ConsumeRandomLengthString(4096);
      const std::string frame = CheckpointEngineAbortFrame(reason);
      const std::string head =
          "\x80\x03"
          "cbuiltins\nRuntimeError\nX";
      FUZZ_CHECK(frame.compare(0, head.size(), head) == 0, "abort frame: head");
      FUZZ_CHECK(frame.size() >= head.size() + 4 + 3, "abort frame: short");
      uint32_t n = 0;
      for (int i = 0; i < 4; ++i)
        n |= uint32_t{static_cast<uint8_t>(frame[head.size() + i])} << (8 * i);
      FUZZ_CHECK(frame.size() == head.size() + 4 + n + 3, "abort frame: text length");
      FUZZ_CHECK(frame.compare(frame.size() - 3, 3, "\x85R.") == 0, "abort frame: tail");
      FUZZ_CHECK(n <= 26 + 512, "abort frame: reason not cut");
      for (uint32_t i = 0; i < n; ++i) {
        const char c = frame[head.size() + 4 + i];
        FUZZ_CHECK(c >= 0x20 && c < 0x7f, "abort frame: text not printable ASCII");
      }
      return;
    }
  }
}

}  // namespace
}  // namespace wsync

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  wsync::FuzzOne(in);
  return 0;
}
