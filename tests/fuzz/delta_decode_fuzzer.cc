// Fuzzes the bucket-delta decoder (common/delta/bucket_delta.h), which a downstream wsyncd runs on
// frames from its upstream, against a fixed bucket of three tensors (bf16, float32, int8).
//
// Input: the delta frame.
//
// Invariants: nothing crashes or is undefined (the sanitizers watch) and nothing is written
// outside the bucket's span; a frame accepted decodes to bytes whose own delta, encoded again,
// decodes to the same bytes; every refusal's message is printable.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/delta/bucket_delta.h"
#include "daemon/core/peer_text.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wsync;  // NOLINT(build/namespaces): a fuzz entry point
  static const BucketManifest manifest = [] {
    BucketManifest m;
    m.tensors.push_back(TensorEntry{"a", DType::kBfloat16, {300}, 0, 600});
    m.tensors.push_back(TensorEntry{"b", DType::kFloat32, {50}, 600, 200});
    m.tensors.push_back(TensorEntry{"c", DType::kInt8, {7}, 800, 7});
    return m;
  }();
  const uint64_t span = manifest.span_bytes();
  std::vector<uint8_t> base(span);
  for (uint64_t i = 0; i < span; ++i) base[i] = static_cast<uint8_t>(i * 31 + 7);
  // A guard past the span: the decoder must not touch it.
  std::vector<uint8_t> out(span + 64, 0x5A);
  const absl::string_view frame(reinterpret_cast<const char*>(data), size);
  DeltaStats stats;
  const absl::Status s =
      DecodeBucketDelta(manifest, base, frame, absl::MakeSpan(out.data(), span), &stats);
  for (uint64_t i = span; i < out.size(); ++i) FUZZ_CHECK(out[i] == 0x5A, "past the span");
  if (!s.ok()) {
    const std::string message(s.message());
    FUZZ_CHECK(SanitizePeerText(message, message.size() + 1) == message, message);
    return 0;
  }
  FUZZ_CHECK(stats.changed_elements <= stats.elements, "more changed than there are");
  const absl::StatusOr<std::string> again =
      EncodeBucketDelta(manifest, base, absl::MakeConstSpan(out.data(), span));
  FUZZ_CHECK(again.ok(), "encode of a decoded bucket");
  std::vector<uint8_t> round(span);
  FUZZ_CHECK(DecodeBucketDelta(manifest, base, *again, absl::MakeSpan(round)).ok(), "re-decode");
  FUZZ_CHECK(std::equal(round.begin(), round.end(), out.begin()), "round trip");
  return 0;
}
