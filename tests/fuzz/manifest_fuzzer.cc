// Fuzzes the bucket manifest checks a trainer's bucket meets in wsyncd before any byte moves:
// the dtype names (ParseDType, as ManifestFromProto reads them), ValidateManifest against the
// slot, the flattened layout, the bucket rules an engine declares, and the SGLang body built
// from a manifest that passed.
//
// Input (FuzzedDataProvider): the slot size, then up to 32 tensors, each a name, a dtype name
// (mostly a known one), a shape of up to 5 dims and an offset and length that are either derived
// from the shape and the previous tensor (so valid buckets are common) or taken as given.
// The same tensors, where their shapes are sound, then go through the client's BucketPlanner
// with the same slot and rules: every bucket the client plans must pass every check wsyncd makes,
// or a trainer's own library would have its updates refused.
//
// Invariants: a manifest that passes has every range inside the slot without wrapping, lengths
// equal to shape x item size, aligned offsets, unique non-empty names and no two overlapping
// ranges (checked here pair by pair, not by the validator's sort); its span is within the slot;
// a flattened layout that passes has a span equal to the sum of its lengths.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bucket_planner.h"
#include "common/dtype.h"
#include "common/manifest.h"
#include "daemon/engines/sglang/sglang_broadcast_binding.h"
#include "tests/fuzz/fuzz_check.h"

namespace wsync {
namespace {

constexpr const char* kDtypeNames[] = {"bfloat16", "float16", "float32",       "float64",
                                       "int64",    "int32",   "int16",         "int8",
                                       "uint8",    "bool",    "float8_e4m3fn", "torch.bfloat16"};

bool IsUtf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

int64_t Dim(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return in.ConsumeIntegral<int64_t>();  // anything: negative, huge
    default:
      return in.ConsumeIntegralInRange<int64_t>(0, 64);
  }
}

BucketManifest ReadManifest(FuzzedDataProvider& in, uint64_t slot_bytes) {
  BucketManifest m;
  const int n = in.ConsumeIntegralInRange<int>(0, 32);
  uint64_t next = 0;
  for (int i = 0; i < n && in.remaining_bytes() > 0; ++i) {
    TensorEntry t;
    t.name = in.ConsumeRandomLengthString(12);
    // gRPC's proto3 parser refuses a string field that is not UTF-8 before wsyncd sees it; the
    // engines' JSON bodies rely on that.
    if (!IsUtf8(t.name)) continue;
    std::string dtype_name =
        in.ConsumeBool() ? in.PickValueInArray(kDtypeNames) : in.ConsumeRandomLengthString(16);
    auto dtype = ParseDType(dtype_name);
    if (!dtype.ok()) {
      FUZZ_CHECK(dtype.status().code() == absl::StatusCode::kInvalidArgument,
                 dtype.status().ToString());
      continue;  // ManifestFromProto refuses the bucket here
    }
    t.dtype = *dtype;
    const int rank = in.ConsumeIntegralInRange<int>(0, 5);
    for (int d = 0; d < rank; ++d) t.shape.push_back(Dim(in));
    if (in.ConsumeBool()) {
      auto numel = NumElements(t.shape);
      t.offset = next + in.ConsumeIntegralInRange<uint64_t>(0, 2) * DTypeSize(t.dtype);
      t.length = numel.ok() ? *numel * DTypeSize(t.dtype) : 0;
    } else {
      t.offset = in.ConsumeBool() ? in.ConsumeIntegral<uint64_t>()
                                  : in.ConsumeIntegralInRange<uint64_t>(0, slot_bytes + 16);
      t.length = in.ConsumeBool() ? in.ConsumeIntegral<uint64_t>()
                                  : in.ConsumeIntegralInRange<uint64_t>(0, 4096);
    }
    next = t.offset + t.length;
    m.tensors.push_back(std::move(t));
  }
  return m;
}

void CheckValid(const BucketManifest& m, uint64_t slot_bytes) {
  FUZZ_CHECK(!m.tensors.empty(), "an empty bucket passed");
  std::set<std::string> names;
  for (const TensorEntry& t : m.tensors) {
    FUZZ_CHECK(!t.name.empty(), "an empty name passed");
    FUZZ_CHECK(names.insert(t.name).second, absl::StrCat("duplicate '", t.name, "' passed"));
    const uint64_t item = DTypeSize(t.dtype);
    FUZZ_CHECK(t.offset <= slot_bytes && t.length <= slot_bytes - t.offset,
               absl::StrCat("[", t.offset, " +", t.length, ") outside ", slot_bytes));
    FUZZ_CHECK(t.offset % item == 0, absl::StrCat("offset ", t.offset, " item ", item));
    auto numel = NumElements(t.shape);
    FUZZ_CHECK(numel.ok(), "a shape NumElements refuses passed");
    FUZZ_CHECK(*numel <= std::numeric_limits<uint64_t>::max() / item && *numel * item == t.length,
               absl::StrCat("length ", t.length, " numel ", *numel));
  }
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    for (size_t j = i + 1; j < m.tensors.size(); ++j) {
      const TensorEntry& a = m.tensors[i];
      const TensorEntry& b = m.tensors[j];
      if (a.length == 0 || b.length == 0) continue;
      FUZZ_CHECK(a.end() <= b.offset || b.end() <= a.offset,
                 absl::StrCat("'", a.name, "' and '", b.name, "' overlap"));
    }
  }
  FUZZ_CHECK(m.span_bytes() <= slot_bytes, absl::StrCat("span ", m.span_bytes()));
}

// The client's planner and wsyncd's checks agree: what one plans, the other accepts.
void CheckPlannerAgrees(const std::vector<TensorEntry>& tensors, uint64_t slot_bytes,
                        const BucketRules& rules) {
  std::vector<TensorDesc> descs;
  for (const TensorEntry& t : tensors) {
    auto numel = NumElements(t.shape);
    if (t.name.empty() || !numel.ok() || *numel > (uint64_t{1} << 20)) continue;
    descs.push_back(TensorDesc{t.name, t.dtype, t.shape, *numel * DTypeSize(t.dtype)});
  }
  std::set<std::string> seen;
  std::vector<TensorDesc> unique;
  for (TensorDesc& d : descs) {
    if (seen.insert(d.name).second) unique.push_back(std::move(d));
  }
  auto planned = PlanBuckets(unique, slot_bytes, /*oversize_alone=*/true, rules);
  if (!planned.ok()) return;
  size_t next = 0;
  for (const PlannedBucket& b : *planned) {
    BucketManifest m;
    for (const PlannedTensor& p : b.tensors) {
      FUZZ_CHECK(p.index == next++, "the planner reordered tensors");
      const TensorDesc& d = unique[p.index];
      m.tensors.push_back(TensorEntry{d.name, d.dtype, d.shape, p.offset, d.bytes});
    }
    const uint64_t slot = b.oversize ? std::max(slot_bytes, b.bytes) : slot_bytes;
    const absl::Status valid = ValidateManifest(m, slot);
    FUZZ_CHECK(valid.ok(), valid.ToString());
    const absl::Status flat = ValidateFlattenedLayout(m);
    FUZZ_CHECK(flat.ok(), flat.ToString());
    const absl::Status ruled = CheckBucketRules(rules, m);
    FUZZ_CHECK(ruled.ok(), ruled.ToString());
  }
  FUZZ_CHECK(next == unique.size(), absl::StrCat(next, " of ", unique.size(), " planned"));
}

}  // namespace
}  // namespace wsync

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wsync;
  FuzzedDataProvider in(data, size);
  const uint64_t slot_bytes = in.ConsumeBool() ? in.ConsumeIntegral<uint64_t>()
                                               : in.ConsumeIntegralInRange<uint64_t>(0, 1 << 16);
  BucketRules rules;
  rules.one_dtype = in.ConsumeBool();
  if (in.ConsumeBool()) rules.close_after_bytes = in.ConsumeIntegralInRange<uint64_t>(1, 1 << 16);
  const BucketManifest m = ReadManifest(in, slot_bytes);
  if (slot_bytes > 0 && slot_bytes <= (uint64_t{1} << 16)) {
    CheckPlannerAgrees(m.tensors, slot_bytes, rules);
  }
  if (!ValidateManifest(m, slot_bytes).ok()) return 0;
  CheckValid(m, slot_bytes);
  (void)CheckBucketRules(rules, m);
  if (ValidateFlattenedLayout(m).ok()) {
    uint64_t sum = 0;
    for (const TensorEntry& t : m.tensors) sum += t.length;
    FUZZ_CHECK(sum == m.span_bytes(),
               absl::StrCat("flattened span ", m.span_bytes(), " sum ", sum));
  }
  for (BucketFormat format : {BucketFormat::kFlattened, BucketFormat::kPerTensor}) {
    const nlohmann::json body = SglangBroadcastBinding::BucketBody(m, "fuzz", format);
    FUZZ_CHECK(body["names"].size() == m.tensors.size(), "a tensor missing from the body");
    (void)body.dump();
  }
  return 0;
}
