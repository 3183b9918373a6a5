// The GPU delta codec against the CPU's (docs/DELTA.md): the encoder writes the CPU frame byte for
// byte, and the decoder rebuilds what the CPU decoder rebuilds and refuses what it refuses, for
// every dtype width, every density, tensors spanning many blocks, odd lengths and offsets. Runs
// only where a CUDA device exists; elsewhere every test skips.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda/delta_decoder.h"
#include "common/cuda/delta_encoder.h"
#include "common/delta/bucket_delta.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/delta_test_data.h"
#include "tests/gpu/skip_without_gpu.h"

namespace wsync::cuda {
namespace {

using delta_test::Changed;
using delta_test::Manifest;
using delta_test::RandomBytes;

// Device copies of the base and the new bucket, and room for a frame.
class OnDevice {
 public:
  OnDevice(const std::vector<uint8_t>& base, const std::vector<uint8_t>& next, size_t frame) {
    cudaMalloc(&base_, std::max<size_t>(base.size(), 1));
    cudaMalloc(&next_, std::max<size_t>(next.size(), 1));
    cudaMalloc(&frame_, std::max<size_t>(frame, 1));
    cudaMemcpy(base_, base.data(), base.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(next_, next.data(), next.size(), cudaMemcpyHostToDevice);
    cudaMemset(frame_, 0xEE, std::max<size_t>(frame, 1));
  }
  ~OnDevice() {
    cudaFree(base_);
    cudaFree(next_);
    cudaFree(frame_);
  }
  std::string Frame(uint64_t bytes) const {
    std::string out(bytes, '\0');
    cudaMemcpy(out.data(), frame_, bytes, cudaMemcpyDeviceToHost);
    return out;
  }
  void* base_ = nullptr;
  void* next_ = nullptr;
  void* frame_ = nullptr;
};

void ExpectSameFrame(DeltaEncoder& encoder, const BucketManifest& m,
                     const std::vector<uint8_t>& base, const std::vector<uint8_t>& next,
                     const std::string& what) {
  DeltaStats cpu_stats;
  absl::StatusOr<std::string> cpu = EncodeBucketDelta(m, base, next, &cpu_stats);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  OnDevice mem(base, next, cpu->size() + 64);
  DeltaStats gpu_stats;
  absl::StatusOr<uint64_t> bytes =
      encoder.Encode(m, mem.base_, mem.next_, mem.frame_, cpu->size() + 64, nullptr, &gpu_stats);
  ASSERT_TRUE(bytes.ok()) << what << ": " << bytes.status();
  ASSERT_EQ(*bytes, cpu->size()) << what;
  const std::string gpu = mem.Frame(*bytes);
  if (gpu != *cpu) {
    size_t at = 0;
    while (at < gpu.size() && gpu[at] == (*cpu)[at]) ++at;
    FAIL() << what << ": the frames differ first at byte " << at << " of " << gpu.size();
  }
  EXPECT_EQ(gpu_stats.changed_elements, cpu_stats.changed_elements) << what;
  EXPECT_EQ(gpu_stats.elements, cpu_stats.elements) << what;
  // And the CPU decoder rebuilds the new bucket from it.
  std::vector<uint8_t> out = base;  // bytes between tensors are the base's in both
  ASSERT_TRUE(DecodeBucketDelta(m, base, gpu, absl::MakeSpan(out)).ok()) << what;
  EXPECT_EQ(out, next) << what;
}

TEST(DeltaEncoder, WritesTheCpuFrameForEveryWidthAndDensity) {
  SKIP_WITHOUT_GPU();
  auto encoder = DeltaEncoder::Create(0);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  // Odd lengths, offsets that are not multiples of 16 (nor of 8 after the int8 tensor), an empty
  // tensor, and a bf16 tensor of many blocks.
  const BucketManifest m = delta_test::OddManifest();
  const std::vector<uint8_t> base = RandomBytes(m.span_bytes(), 1);
  for (double fraction : {0.0, 0.0001, 0.001, 0.01, 0.05, 0.1, 0.3, 0.5, 0.9, 0.97, 1.0}) {
    ExpectSameFrame(**encoder, m, base, Changed(m, base, fraction, 7),
                    "changed " + std::to_string(fraction));
  }
}

TEST(DeltaEncoder, AlignedBucketsTakeTheWideLoads) {
  SKIP_WITHOUT_GPU();
  auto encoder = DeltaEncoder::Create(0);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  // Every tensor 256-byte aligned, as a trainer's bucket plan lays them out.
  BucketManifest m;
  uint64_t at = 0;
  for (int i = 0; i < 12; ++i) {
    const uint64_t elements = 100000 + 4096 * i;
    m.tensors.push_back(TensorEntry{"w" + std::to_string(i),
                                    DType::kBfloat16,
                                    {static_cast<int64_t>(elements)},
                                    at,
                                    2 * elements});
    at = (at + 2 * elements + 255) / 256 * 256;
  }
  // Bytes between tensors are not part of a delta; a bucket the relay encodes has none, but the
  // encoder does not care.
  const std::vector<uint8_t> base = RandomBytes(m.span_bytes(), 2);
  for (double fraction : {0.001, 0.01, 0.2, 1.0}) {
    ExpectSameFrame(**encoder, m, base, Changed(m, base, fraction, 9),
                    "aligned, changed " + std::to_string(fraction));
  }
}

TEST(DeltaEncoder, AFrameThatCannotBeSmallerThanTheLimitIsNotWritten) {
  SKIP_WITHOUT_GPU();
  auto encoder = DeltaEncoder::Create(0);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  const BucketManifest m = Manifest({{DType::kBfloat16, 300000}});
  std::vector<uint8_t> base(m.span_bytes(), 3);
  const std::vector<uint8_t> all = Changed(m, base, 1.0, 5);
  OnDevice mem(base, all, m.span_bytes() + 64);
  DeltaStats stats;
  absl::StatusOr<uint64_t> over = (*encoder)->Encode(
      m, mem.base_, mem.next_, mem.frame_, m.span_bytes() + 64, nullptr, &stats, m.span_bytes());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  EXPECT_EQ(stats.changed_elements, 300000u);
  EXPECT_EQ(mem.Frame(4), std::string(4, '\xEE'));  // nothing written
  // A frame larger than its buffer is refused too.
  absl::StatusOr<uint64_t> small =
      (*encoder)->Encode(m, mem.base_, mem.next_, mem.frame_, 1000, nullptr);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kResourceExhausted) << small.status();
  EXPECT_EQ(mem.Frame(4), std::string(4, '\xEE'));
}

// Device memory holding `bytes`, read back as a vector.
class DeviceBytes {
 public:
  explicit DeviceBytes(const void* bytes, size_t n) : n_(n) {
    cudaMalloc(&data_, std::max<size_t>(n, 1));
    if (bytes != nullptr) cudaMemcpy(data_, bytes, n, cudaMemcpyHostToDevice);
  }
  ~DeviceBytes() { cudaFree(data_); }
  void* get() const { return data_; }
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> out(n_);
    cudaMemcpy(out.data(), data_, n_, cudaMemcpyDeviceToHost);
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t n_;
};

TEST(DeltaDecoder, RebuildsWhatTheCpuDecoderRebuildsAtEveryDensity) {
  SKIP_WITHOUT_GPU();
  auto decoder = DeltaDecoder::Create(0);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  const BucketManifest m = delta_test::OddManifest();
  std::vector<uint8_t> base = RandomBytes(m.span_bytes(), 4);
  for (double fraction : {0.0, 0.0001, 0.001, 0.01, 0.05, 0.1, 0.3, 0.5, 0.9, 1.0}) {
    const std::vector<uint8_t> next = Changed(m, base, fraction, 11);
    DeltaStats cpu_stats;
    absl::StatusOr<std::string> frame = EncodeBucketDelta(m, base, next, &cpu_stats);
    ASSERT_TRUE(frame.ok()) << frame.status();
    DeviceBytes d_base(base.data(), base.size()), d_frame(frame->data(), frame->size());
    // Into other memory (seeded with the base's bytes between tensors: there are none here).
    DeviceBytes d_out(nullptr, base.size());
    DeltaStats gpu_stats;
    absl::Status s = (*decoder)->Decode(m, d_base.get(), d_frame.get(), frame->size(), d_out.get(),
                                        nullptr, &gpu_stats);
    ASSERT_TRUE(s.ok()) << fraction << ": " << s;
    EXPECT_EQ(d_out.Read(), next) << fraction;
    EXPECT_EQ(gpu_stats.changed_elements, cpu_stats.changed_elements) << fraction;
    // And in place, over the base.
    s = (*decoder)->Decode(m, d_base.get(), d_frame.get(), frame->size(), d_base.get(), nullptr);
    ASSERT_TRUE(s.ok()) << fraction << ": " << s;
    EXPECT_EQ(d_base.Read(), next) << fraction << " in place";
  }
}

TEST(DeltaDecoder, RefusesEveryMalformedFrameTheCpuDecoderRefuses) {
  SKIP_WITHOUT_GPU();
  auto decoder = DeltaDecoder::Create(0);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  const BucketManifest m = delta_test::MalformedManifest();
  const std::vector<uint8_t> base = RandomBytes(m.span_bytes(), 9);
  const std::vector<uint8_t> next = Changed(m, base, 0.05, 10);
  const std::string good = *EncodeBucketDelta(m, base, next);
  ASSERT_EQ(good[8], static_cast<char>(DeltaForm::kGaps));
  // At 20 % changed the tensors go as bitmaps (checked below, each with a bit past its end).
  const std::vector<uint8_t> fifth = Changed(m, base, 0.2, 12);
  const std::string bitmap = *EncodeBucketDelta(m, base, fifth);
  DeviceBytes d_base(base.data(), base.size()), d_out(nullptr, base.size());
  for (const delta_test::MalformedFrame& c : delta_test::MalformedFrames(good)) {
    std::vector<uint8_t> cpu_out(m.span_bytes());
    const absl::Status cpu = DecodeBucketDelta(m, base, c.frame, absl::MakeSpan(cpu_out));
    DeviceBytes d_frame(c.frame.data(), c.frame.size());
    const absl::Status gpu =
        (*decoder)->Decode(m, d_base.get(), d_frame.get(), c.frame.size(), d_out.get(), nullptr);
    EXPECT_EQ(cpu.code(), absl::StatusCode::kInvalidArgument) << c.named << ": " << cpu;
    EXPECT_EQ(gpu.code(), absl::StatusCode::kInvalidArgument) << c.named << ": " << gpu;
    EXPECT_THAT(std::string(gpu.message()), ::testing::HasSubstr(c.named)) << gpu;
  }
  // Every bitmap tensor of a frame, each bit past its end set, is refused naming the element.
  size_t at = 8, checked = 0;
  for (const TensorEntry& t : m.tensors) {
    const auto form_at = static_cast<uint8_t>(bitmap[at]);
    uint64_t size = 0;
    for (int i = 0; i < 8; ++i)
      size |= uint64_t{static_cast<uint8_t>(bitmap[at + 9 + i])} << (8 * i);
    const uint64_t n = t.length / DTypeSize(t.dtype);
    if (form_at == static_cast<uint8_t>(DeltaForm::kBitmap) && n % 8 != 0) {
      std::string past = bitmap;
      past[at + 17 + (n + 7) / 8 - 1] |= static_cast<char>(0x80);
      DeviceBytes d_frame(past.data(), past.size());
      const absl::Status gpu =
          (*decoder)->Decode(m, d_base.get(), d_frame.get(), past.size(), d_out.get(), nullptr);
      EXPECT_EQ(gpu.code(), absl::StatusCode::kInvalidArgument) << gpu;
      EXPECT_THAT(std::string(gpu.message()),
                  ::testing::HasSubstr(absl::StrCat("the bitmap marks element ", n / 8 * 8 + 7)))
          << gpu;
      ++checked;
    }
    at += 17 + size;
  }
  EXPECT_GE(checked, 1u) << "no tensor went as a bitmap: the case above tested nothing";
}

}  // namespace
}  // namespace wsync::cuda
