#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bucket_planner.h"
#include "common/checksum.h"
#include "common/dtype.h"
#include "common/gpu_sharing.h"
#include "common/manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST(DType, ParsesTorchNamesWithSizes) {
  EXPECT_EQ(DTypeSize(*ParseDType("bfloat16")), 2u);
  EXPECT_EQ(DTypeSize(*ParseDType("float32")), 4u);
  EXPECT_EQ(DTypeSize(*ParseDType("int64")), 8u);
  EXPECT_EQ(DTypeSize(*ParseDType("float8_e4m3fn")), 1u);
  EXPECT_EQ(DTypeName(*ParseDType("float16")), "float16");
}

TEST(DType, UnknownNameIsInvalidArgumentListingKnownNames) {
  auto d = ParseDType("torch.bfloat16");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("unknown dtype 'torch.bfloat16'"));
  EXPECT_THAT(d.status().message(), HasSubstr("bfloat16"));
}

TEST(Checksum, MatchesTheStandardCrc32CheckValue) {
  const char* s = "123456789";
  EXPECT_EQ(Crc32(s, 9), 0xCBF43926u);
  EXPECT_EQ(Crc32Hex(0xCBF43926u), "cbf43926");
}

uint32_t ZlibCrc32(const uint8_t* p, size_t n, uint32_t crc) {
  return static_cast<uint32_t>(crc32_z(crc, p, n));
}

// Crc32 takes a carry-less-multiply path on CPUs that have one; it must equal zlib exactly.
TEST(Checksum, EqualsZlibForEveryShortLengthAndAlignment) {
  std::vector<uint8_t> data(1024 + 64);
  std::mt19937_64 rng(3);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 16; ++offset) {
    for (size_t n = 0; n <= 1024; ++n) {
      const uint32_t seed = n % 3 == 0 ? 0 : static_cast<uint32_t>(rng());
      ASSERT_EQ(Crc32(data.data() + offset, n, seed), ZlibCrc32(data.data() + offset, n, seed))
          << "offset " << offset << ", " << n << " bytes, crc " << seed;
    }
  }
}

TEST(Checksum, EqualsZlibForLongRandomSpans) {
  std::vector<uint8_t> data(9u << 20);
  std::mt19937_64 rng(5);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (int i = 0; i < 48; ++i) {
    const size_t offset = rng() % 4096;
    const size_t n = rng() % (data.size() - offset + 1);
    const uint32_t seed = static_cast<uint32_t>(rng());
    ASSERT_EQ(Crc32(data.data() + offset, n, seed), ZlibCrc32(data.data() + offset, n, seed))
        << "offset " << offset << ", " << n << " bytes";
  }
  // All-zero and all-ones bytes, where a mistake in the initial register would show.
  std::vector<uint8_t> zeros(1 << 20, 0), ones(1 << 20, 0xFF);
  EXPECT_EQ(Crc32(zeros.data(), zeros.size()), ZlibCrc32(zeros.data(), zeros.size(), 0));
  EXPECT_EQ(Crc32(ones.data(), ones.size()), ZlibCrc32(ones.data(), ones.size(), 0));
}

TEST(SampledChecksum, WindowsCoverEachMebibytesStartAndTheSpansEnd) {
  using W = std::vector<std::pair<uint64_t, uint64_t>>;
  const auto windows = [](uint64_t span) {
    W out;
    for (const ByteWindow& w : SampledWindows(span)) out.emplace_back(w.offset, w.bytes);
    return out;
  };
  constexpr uint64_t kMiB = 1 << 20;
  EXPECT_EQ(windows(0), W{});
  EXPECT_EQ(windows(100), (W{{0, 100}}));
  EXPECT_EQ(windows(4096), (W{{0, 4096}}));
  EXPECT_EQ(windows(6000), (W{{0, 4096}, {4096, 1904}})) << "the end, without overlap";
  EXPECT_EQ(windows(kMiB), (W{{0, 4096}, {kMiB - 4096, 4096}}));
  EXPECT_EQ(windows(kMiB + 10), (W{{0, 4096}, {kMiB, 10}})) << "a last window that is the end";
  EXPECT_EQ(
      windows(3 * kMiB + 5000),
      (W{{0, 4096}, {kMiB, 4096}, {2 * kMiB, 4096}, {3 * kMiB, 4096}, {3 * kMiB + 4096, 904}}));
  EXPECT_EQ(SampledBytes(4 * (uint64_t{1} << 30)), (4096u + 1) * 4096u) << "1/256 of 4 GiB";
}

TEST(SampledChecksum, IsTheCrcOfTheWindowsLaidEndToEnd) {
  std::vector<uint8_t> data((5u << 20) + 123);
  std::mt19937_64 rng(3);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  std::string packed;
  for (const ByteWindow& w : SampledWindows(data.size())) {
    packed.append(reinterpret_cast<const char*>(data.data()) + w.offset, w.bytes);
  }
  const uint32_t sampled = SampledCrc32(data.data(), data.size());
  EXPECT_EQ(sampled, Crc32(packed.data(), packed.size()));
  // A change inside a window shows; one between windows does not (the check's reach).
  data[(2u << 20) + 17] ^= 1;
  EXPECT_NE(SampledCrc32(data.data(), data.size()), sampled);
  data[(2u << 20) + 17] ^= 1;
  data[(2u << 20) + 4096] ^= 1;
  EXPECT_EQ(SampledCrc32(data.data(), data.size()), sampled);
  // The span's last byte is always sampled.
  data.back() ^= 1;
  EXPECT_NE(SampledCrc32(data.data(), data.size()), sampled);
}

TEST(SampledChecksum, KindsReadByName) {
  for (ChecksumKind kind :
       {ChecksumKind::kNone, ChecksumKind::kCrc32, ChecksumKind::kCrc32Sampled}) {
    EXPECT_EQ(ParseChecksumKind(ChecksumKindName(kind)), kind);
  }
  EXPECT_EQ(ChecksumKindName(ChecksumKind::kCrc32Sampled), "crc32-sampled");
  EXPECT_EQ(ParseChecksumKind("auto"), std::nullopt);
  EXPECT_EQ(ParseChecksumKind("CRC32"), std::nullopt);
}

TEST(Checksum, ChainedCallsEqualOneCall) {
  std::vector<uint8_t> data(3u << 20);
  std::mt19937_64 rng(9);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint32_t whole = ZlibCrc32(data.data(), data.size(), 0);
  ASSERT_EQ(Crc32(data.data(), data.size()), whole);
  for (int round = 0; round < 20; ++round) {
    // Pieces of every size class: short (zlib on every path), around the 64-byte threshold, long.
    uint32_t crc = 0;
    size_t at = 0;
    while (at < data.size()) {
      const size_t limits[] = {16, 200, 1u << 20};
      const size_t n = std::min(data.size() - at, rng() % (limits[rng() % 3] + 1));
      crc = Crc32(data.data() + at, n, crc);
      at += n;
    }
    ASSERT_EQ(crc, whole) << "round " << round;
  }
}

TEST(Checksum, ChunksCombineToTheSerialValue) {
  std::vector<uint8_t> data(40u << 20);
  std::mt19937_64 rng(7);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint32_t serial = Crc32(data.data(), data.size());
  EXPECT_EQ(Crc32Parallel(data.data(), data.size(), 2), serial);
  EXPECT_EQ(Crc32Parallel(data.data(), data.size(), 3), serial);
  const size_t cut = 12345;
  EXPECT_EQ(Crc32Combine(Crc32(data.data(), cut), Crc32(data.data() + cut, data.size() - cut),
                         data.size() - cut),
            serial);
  data[data.size() / 2] ^= 1;
  EXPECT_NE(Crc32Parallel(data.data(), data.size(), 2), serial);
}

TEST(Checksum, ZeroByteOperatorCombinesLikeZlib) {
  std::mt19937_64 rng(11);
  for (uint64_t n : {0ull, 1ull, 7ull, 4096ull, 1ull << 20, (1ull << 32) + 5}) {
    const uint32_t a = static_cast<uint32_t>(rng()), b = static_cast<uint32_t>(rng());
    EXPECT_EQ(Crc32Operator::ZeroBytes(n).Apply(a) ^ b, Crc32Combine(a, b, n)) << n;
  }
}

TEST(Checksum, ChunkTreeAsTheGpuKernelReducesItEqualsTheSerialValue) {
  // The kernel's scheme: 1 KiB chunks, pairs merged bottom-up in blocks of 256 chunks with the
  // operator for the right part's length, a partial last block, then the blocks in order (whole
  // ones through the table form of the operator) and a tail of under one chunk.
  constexpr uint64_t kChunk = 1024, kPerBlock = 256;
  std::vector<uint8_t> data(kChunk * (3 * kPerBlock + 37) + 1000);
  std::mt19937_64 rng(5);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  const uint64_t full = data.size() / kChunk;
  std::vector<Crc32Operator> shift;
  for (uint64_t c = 1; c <= kPerBlock; c *= 2)
    shift.push_back(Crc32Operator::ZeroBytes(c * kChunk));
  auto shift_chunks = [&](uint64_t chunks, uint32_t crc) {
    for (int bit = 0; chunks != 0; ++bit, chunks >>= 1) {
      if (chunks & 1) crc = shift[bit].Apply(crc);
    }
    return crc;
  };
  const Crc32OperatorTable whole(Crc32Operator::ZeroBytes(kPerBlock * kChunk));
  uint32_t total = 0;
  for (uint64_t first = 0; first < full; first += kPerBlock) {
    const uint64_t m = std::min(kPerBlock, full - first);
    std::vector<uint32_t> crcs(m);
    for (uint64_t i = 0; i < m; ++i) crcs[i] = Crc32(&data[(first + i) * kChunk], kChunk);
    for (uint64_t stride = 1; stride < kPerBlock; stride *= 2) {
      for (uint64_t i = 0; i + stride < m; i += 2 * stride) {
        const uint64_t right = std::min(stride, m - (i + stride));
        crcs[i] = shift_chunks(right, crcs[i]) ^ crcs[i + stride];
      }
    }
    total =
        m == kPerBlock ? whole.Apply(total) ^ crcs[0] : Crc32Combine(total, crcs[0], m * kChunk);
  }
  const uint64_t tail = data.size() - full * kChunk;
  total = Crc32Combine(total, Crc32(&data[full * kChunk], tail), tail);
  EXPECT_EQ(total, Crc32(data.data(), data.size()));
}

TEST(GpuSharing, FindsTheMpsControlPipeWhereCudaClientsLook) {
  char dir[] = "/tmp/wsync-mps-test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  ASSERT_EQ(setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1), 0);
  GpuSharing none = DetectGpuSharing();
  EXPECT_FALSE(none.mps);
  EXPECT_EQ(none.control_pipe, std::string(dir) + "/control");
  EXPECT_NE(none.Describe().find("take turns by time slice"), std::string::npos);
  EXPECT_EQ(none.Summary(), "time slices (no " + std::string(dir) + "/control)");
  const std::string pipe = std::string(dir) + "/control";
  ASSERT_EQ(mkfifo(pipe.c_str(), 0600), 0);
  GpuSharing found = DetectGpuSharing();
  EXPECT_TRUE(found.mps);
  EXPECT_NE(found.Describe().find("MPS is running"), std::string::npos);
  EXPECT_EQ(found.Summary(), "mps");
  unlink(pipe.c_str());
  rmdir(dir);
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
  EXPECT_EQ(DetectGpuSharing().control_pipe, "/tmp/nvidia-mps/control");
}

TEST(Checksum, OperatorTableAppliesTheSameMapInFourLookups) {
  std::mt19937_64 rng(3);
  for (uint64_t n : {1ull, 512ull, 256ull << 10, (1ull << 30) + 3}) {
    const Crc32Operator op = Crc32Operator::ZeroBytes(n);
    const Crc32OperatorTable table(op);
    for (int k = 0; k < 64; ++k) {
      const uint32_t crc = static_cast<uint32_t>(rng());
      EXPECT_EQ(table.Apply(crc), op.Apply(crc)) << n;
    }
  }
}

TensorEntry T(std::string name, const char* dtype, std::vector<int64_t> shape, uint64_t offset,
              uint64_t length) {
  return TensorEntry{std::move(name), *ParseDType(dtype), std::move(shape), offset, length};
}

TEST(Manifest, AcceptsAValidBucket) {
  BucketManifest m{{T("a", "bfloat16", {4, 4}, 0, 32), T("b", "float32", {2}, 32, 8),
                    T("c", "int64", {1}, 40, 8)}};
  EXPECT_TRUE(ValidateManifest(m, 64).ok());
  EXPECT_TRUE(ValidateFlattenedLayout(m).ok());
  EXPECT_EQ(m.span_bytes(), 48u);
}

struct BadCase {
  const char* label;
  BucketManifest manifest;
  const char* message;
};

TEST(Manifest, RefusesEveryKindOfBadBucketWithAPreciseMessage) {
  std::vector<BadCase> cases = {
      {"empty", BucketManifest{}, "empty bucket"},
      {"overlap", BucketManifest{{T("a", "float32", {4}, 0, 16), T("b", "float32", {4}, 8, 16)}},
       "overlap"},
      {"outside", BucketManifest{{T("a", "float32", {32}, 0, 128)}}, "outside the slot of 64"},
      {"offset past end", BucketManifest{{T("a", "uint8", {1}, 64, 1)}}, "outside the slot"},
      {"shape x itemsize", BucketManifest{{T("a", "bfloat16", {3, 3}, 0, 16)}},
       "shape [3, 3] x 2 bytes (bfloat16) != length 16"},
      {"duplicate", BucketManifest{{T("a", "uint8", {1}, 0, 1), T("a", "uint8", {1}, 1, 1)}},
       "duplicate tensor name 'a'"},
      {"empty name", BucketManifest{{T("", "uint8", {1}, 0, 1)}}, "empty name"},
      {"misaligned", BucketManifest{{T("a", "float32", {1}, 2, 4)}},
       "not a multiple of its item size 4"},
      {"negative dim", BucketManifest{{T("a", "float32", {-1}, 0, 4)}}, "negative dimension"},
  };
  for (const BadCase& c : cases) {
    absl::Status s = ValidateManifest(c.manifest, 64);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.label;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.label;
  }
}

TEST(Manifest, FlattenedLayoutRefusesGapsAndReordering) {
  BucketManifest gap{{T("a", "uint8", {4}, 0, 4), T("b", "uint8", {4}, 8, 4)}};
  ASSERT_TRUE(ValidateManifest(gap, 64).ok());
  EXPECT_THAT(ValidateFlattenedLayout(gap).message(), HasSubstr("'b' starts at 8"));
  BucketManifest reordered{{T("a", "uint8", {4}, 4, 4), T("b", "uint8", {4}, 0, 4)}};
  EXPECT_FALSE(ValidateFlattenedLayout(reordered).ok());
}

TensorDesc D(std::string name, const char* dtype, int64_t numel) {
  DType d = *ParseDType(dtype);
  return TensorDesc{std::move(name), d, {numel}, static_cast<uint64_t>(numel) * DTypeSize(d)};
}

TEST(BucketPlanner, KeepsOrderAndFillsSlots) {
  std::vector<TensorDesc> ts = {D("a", "uint8", 40), D("b", "uint8", 40), D("c", "uint8", 20),
                                D("d", "uint8", 100)};
  auto plan = PlanBuckets(ts, 100);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[0].bytes, 100u);
  ASSERT_EQ((*plan)[0].tensors.size(), 3u);
  EXPECT_EQ((*plan)[0].tensors[2].index, 2u);
  EXPECT_EQ((*plan)[0].tensors[2].offset, 80u);
  EXPECT_EQ((*plan)[1].tensors[0].index, 3u);
  EXPECT_EQ((*plan)[1].tensors[0].offset, 0u);
}

TEST(BucketPlanner, ClosesABucketRatherThanMisaligningATensor) {
  // 3 bf16 = 6 bytes, so a float32 right after would sit at offset 6.
  std::vector<TensorDesc> ts = {D("bias", "bfloat16", 3), D("norm", "float32", 2),
                                D("next", "bfloat16", 1)};
  auto plan = PlanBuckets(ts, 1024);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[0].bytes, 6u);
  EXPECT_EQ((*plan)[1].tensors[0].offset, 0u);
  EXPECT_EQ((*plan)[1].tensors[1].offset, 8u);
  for (const auto& b : *plan) {
    for (const auto& t : b.tensors) {
      EXPECT_EQ(t.offset % DTypeSize(ts[t.index].dtype), 0u) << ts[t.index].name;
    }
  }
}

TEST(BucketPlanner, RefusesATensorLargerThanASlotBeforePlanningAnything) {
  std::vector<TensorDesc> ts = {D("small", "uint8", 10), D("huge", "float32", 1000)};
  auto plan = PlanBuckets(ts, 1000);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("'huge' is 4000 bytes, larger than a slot"));
}

TEST(BucketPlanner, OversizeTensorTravelsAloneBetweenTheBucketsAroundIt) {
  std::vector<TensorDesc> ts = {D("a", "uint8", 10), D("huge", "float32", 1000),
                                D("b", "uint8", 10)};
  auto plan = PlanBuckets(ts, 1000, /*oversize_alone=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 3u);
  EXPECT_FALSE((*plan)[0].oversize);
  EXPECT_TRUE((*plan)[1].oversize);
  EXPECT_EQ((*plan)[1].bytes, 4000u);
  EXPECT_EQ((*plan)[1].tensors[0].index, 1u);
  EXPECT_EQ((*plan)[1].tensors[0].offset, 0u);
  EXPECT_FALSE((*plan)[2].oversize);
  EXPECT_EQ((*plan)[2].tensors[0].index, 2u);
}

TEST(BucketPlanner, ExactSlotSizedTensorFitsAlone) {
  auto plan = PlanBuckets({D("x", "uint8", 1), D("full", "uint8", 64), D("y", "uint8", 1)}, 64);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 3u);
  EXPECT_EQ((*plan)[1].bytes, 64u);
}

// Bucket rules: what an engine protocol demands of a bucket beyond fitting a slot.

std::vector<std::vector<size_t>> Indices(const std::vector<PlannedBucket>& plan) {
  std::vector<std::vector<size_t>> out;
  for (const PlannedBucket& b : plan) {
    out.emplace_back();
    for (const PlannedTensor& t : b.tensors) out.back().push_back(t.index);
  }
  return out;
}

// vLLM's packed producer, written as plainly as it is there: append the tensor, add
// numel * itemsize to the running total, and close the chunk once the total exceeds its size.
std::vector<std::vector<size_t>> VllmChunks(const std::vector<TensorDesc>& ts, uint64_t chunk) {
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> open;
  uint64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    uint64_t numel = 1;
    for (int64_t d : ts[i].shape) numel *= d;
    open.push_back(i);
    total += numel * DTypeSize(ts[i].dtype);
    if (total > chunk) {
      out.push_back(std::exchange(open, {}));
      total = 0;
    }
  }
  if (!open.empty()) out.push_back(open);
  return out;
}

// Each planned bucket as the manifest its Bucket message would carry.
BucketManifest ManifestOf(const PlannedBucket& b, const std::vector<TensorDesc>& ts) {
  BucketManifest m;
  for (const PlannedTensor& t : b.tensors) {
    const TensorDesc& d = ts[t.index];
    m.tensors.push_back(TensorEntry{d.name, d.dtype, d.shape, t.offset, d.bytes});
  }
  return m;
}

TEST(BucketRules, OneDtypeSplitsAtEachDtypeChangeKeepingOrder) {
  // 8 bytes each, so without the rule every offset is aligned and all fit one bucket.
  std::vector<TensorDesc> ts = {D("a", "bfloat16", 4), D("b", "bfloat16", 4),
                                D("c", "float32", 2),  D("d", "float32", 2),
                                D("e", "int64", 1),    D("f", "bfloat16", 4)};
  auto free_plan = PlanBuckets(ts, 1024);
  ASSERT_TRUE(free_plan.ok()) << free_plan.status();
  EXPECT_EQ(free_plan->size(), 1u);

  auto plan = PlanBuckets(ts, 1024, /*oversize_alone=*/false, BucketRules{.one_dtype = true});
  ASSERT_TRUE(plan.ok()) << plan.status();
  using Idx = std::vector<std::vector<size_t>>;
  EXPECT_EQ(Indices(*plan), (Idx{{0, 1}, {2, 3}, {4}, {5}}));
  for (const PlannedBucket& b : *plan) {
    EXPECT_EQ(b.tensors.front().offset, 0u);
    EXPECT_TRUE(CheckBucketRules(BucketRules{.one_dtype = true}, ManifestOf(b, ts)).ok());
  }
  EXPECT_EQ((*plan)[0].tensors[1].offset, 8u);
  EXPECT_EQ((*plan)[0].bytes, 16u);
}

TEST(BucketRules, OneDtypeStillClosesAFullSlot) {
  std::vector<TensorDesc> ts = {D("a", "float32", 10), D("b", "float32", 10), D("c", "float32", 10),
                                D("d", "bfloat16", 2)};
  auto plan = PlanBuckets(ts, 80, /*oversize_alone=*/false, BucketRules{.one_dtype = true});
  ASSERT_TRUE(plan.ok()) << plan.status();
  using Idx = std::vector<std::vector<size_t>>;
  EXPECT_EQ(Indices(*plan), (Idx{{0, 1}, {2}, {3}}));
}

TEST(BucketRules, CloseAfterBytesClosesRightAfterTheTensorThatExceedsIt) {
  const BucketRules rules{.close_after_bytes = 100};
  // 60 + 40 = 100 is not past 100; the 1-byte tensor takes it past and stays in the bucket.
  std::vector<TensorDesc> ts = {D("a", "uint8", 60), D("b", "uint8", 40), D("c", "uint8", 1),
                                D("d", "uint8", 60), D("e", "uint8", 50), D("f", "uint8", 7)};
  auto plan = PlanBuckets(ts, 1024, /*oversize_alone=*/false, rules);
  ASSERT_TRUE(plan.ok()) << plan.status();
  using Idx = std::vector<std::vector<size_t>>;
  EXPECT_EQ(Indices(*plan), (Idx{{0, 1, 2}, {3, 4}, {5}}));
  EXPECT_EQ((*plan)[0].bytes, 101u);
  EXPECT_EQ((*plan)[1].bytes, 110u);
  EXPECT_EQ(Indices(*plan), VllmChunks(ts, 100));
}

TEST(BucketRules, CloseAfterBytesMatchesVllmsChunkWalkOnARandomModel) {
  // Mixed dtypes whose sizes are multiples of 8 bytes, so alignment never closes a bucket, and a
  // slot that holds a chunk plus its largest tensor, so neither does the slot: the cut is vLLM's.
  std::mt19937 rng(20240611);
  const char* dtypes[] = {"bfloat16", "float32", "int64", "uint8", "float16"};
  std::vector<TensorDesc> ts;
  for (int i = 0; i < 500; ++i) {
    const bool large = rng() % 4 == 0;
    const int64_t numel = 8 * (1 + static_cast<int64_t>(rng() % (large ? 4000 : 60)));
    ts.push_back(D(absl::StrCat("t", i), dtypes[rng() % 5], numel));
  }
  constexpr uint64_t kLargest = 8 * 4000 * 8;
  for (uint64_t chunk : {1ull, 64ull, 1000ull, 4096ull, 65536ull}) {
    const BucketRules rules{.close_after_bytes = chunk};
    auto plan = PlanBuckets(ts, chunk + kLargest, /*oversize_alone=*/false, rules);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(Indices(*plan), VllmChunks(ts, chunk)) << "chunk " << chunk;
    for (const PlannedBucket& b : *plan) {
      EXPECT_TRUE(CheckBucketRules(rules, ManifestOf(b, ts)).ok()) << "chunk " << chunk;
    }
  }
}

TEST(BucketRules, CloseAfterBytesYieldsToTheSlot) {
  // The slot closes a bucket before a tensor that would not fit, whatever the chunk says.
  const BucketRules rules{.close_after_bytes = 80};
  std::vector<TensorDesc> ts = {D("a", "uint8", 50), D("b", "uint8", 40), D("c", "uint8", 50),
                                D("d", "uint8", 60), D("e", "uint8", 30)};
  auto plan = PlanBuckets(ts, 100, /*oversize_alone=*/false, rules);
  ASSERT_TRUE(plan.ok()) << plan.status();
  using Idx = std::vector<std::vector<size_t>>;
  // a+b = 90 > 80: closed after b. c alone would take 110 with d: the slot closes it first.
  // d+e = 90 > 80: closed after e.
  EXPECT_EQ(Indices(*plan), (Idx{{0, 1}, {2}, {3, 4}}));
  for (const PlannedBucket& b : *plan) EXPECT_LE(b.bytes, 100u);
}

TEST(BucketRules, CloseAfterBytesKeepsTheAlignmentRule) {
  // 3 bf16 = 6 bytes: a float32 right after would sit at offset 6, so that bucket closes early.
  const BucketRules rules{.close_after_bytes = 100};
  std::vector<TensorDesc> ts = {D("bias", "bfloat16", 3), D("norm", "float32", 2),
                                D("w", "uint8", 200), D("next", "uint8", 1)};
  auto plan = PlanBuckets(ts, 1024, /*oversize_alone=*/false, rules);
  ASSERT_TRUE(plan.ok()) << plan.status();
  using Idx = std::vector<std::vector<size_t>>;
  EXPECT_EQ(Indices(*plan), (Idx{{0}, {1, 2}, {3}}));
}

TEST(BucketRules, BothRulesWithTheSlotLimit) {
  const BucketRules rules{.one_dtype = true, .close_after_bytes = 64};
  std::vector<TensorDesc> ts = {
      D("a", "bfloat16", 16),  // 32
      D("b", "bfloat16", 8),   // 16 -> 48
      D("c", "bfloat16", 16),  // 32 -> 80 > 64: closes after c
      D("d", "float32", 4),    // 16, new dtype
      D("e", "bfloat16", 2),   // 4, new dtype closes d's bucket
      D("f", "bfloat16", 40),  // 80 -> 84: fits the 96-byte slot, past 64: closes after f
      D("g", "int64", 6),      // 48
      D("h", "int64", 8),      // 64 -> 112 would not fit the slot: g's bucket closes before h
  };
  auto plan = PlanBuckets(ts, 96, /*oversize_alone=*/false, rules);
  ASSERT_TRUE(plan.ok()) << plan.status();
  using Idx = std::vector<std::vector<size_t>>;
  EXPECT_EQ(Indices(*plan), (Idx{{0, 1, 2}, {3}, {4, 5}, {6}, {7}}));
  for (const PlannedBucket& b : *plan) {
    EXPECT_LE(b.bytes, 96u);
    EXPECT_TRUE(CheckBucketRules(rules, ManifestOf(b, ts)).ok());
  }
}

TEST(BucketRules, OversizeTensorStillTravelsAlone) {
  const BucketRules rules{.one_dtype = true, .close_after_bytes = 500};
  std::vector<TensorDesc> ts = {D("a", "float32", 10), D("huge", "float32", 1000),
                                D("b", "float32", 10)};
  auto plan = PlanBuckets(ts, 1000, /*oversize_alone=*/true, rules);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 3u);
  EXPECT_TRUE((*plan)[1].oversize);
  EXPECT_EQ((*plan)[1].tensors.size(), 1u);
  auto refused = PlanBuckets(ts, 1000, /*oversize_alone=*/false, rules);
  EXPECT_THAT(refused.status().message(), HasSubstr("larger than a slot"));
}

TEST(BucketRules, DefaultRulesPlanAsBefore) {
  std::vector<TensorDesc> ts = {D("bias", "bfloat16", 3), D("norm", "float32", 2),
                                D("next", "bfloat16", 1), D("w", "uint8", 1000)};
  auto before = PlanBuckets(ts, 1024);
  auto with_none = PlanBuckets(ts, 1024, /*oversize_alone=*/false, BucketRules{});
  ASSERT_TRUE(before.ok() && with_none.ok());
  EXPECT_EQ(Indices(*before), Indices(*with_none));
}

TEST(BucketRules, MergeIsTheUnion) {
  BucketRules r;
  r.Merge(BucketRules{});
  EXPECT_EQ(r, BucketRules{});
  r.Merge(BucketRules{.one_dtype = true});
  EXPECT_EQ(r, (BucketRules{.one_dtype = true}));
  r.Merge(BucketRules{.close_after_bytes = 64 << 20});
  EXPECT_EQ(r, (BucketRules{.one_dtype = true, .close_after_bytes = 64 << 20}));
  r.Merge(BucketRules{.close_after_bytes = 32 << 20});
  EXPECT_EQ(r.close_after_bytes, 32u << 20);
  r.Merge(BucketRules{.close_after_bytes = 128 << 20});
  EXPECT_EQ(r.close_after_bytes, 32u << 20);
  r.Merge(BucketRules{});
  EXPECT_EQ(r, (BucketRules{.one_dtype = true, .close_after_bytes = 32 << 20}));
}

TEST(BucketRules, DescribeNamesEachRule) {
  EXPECT_EQ(BucketRules{}.Describe(), "none");
  EXPECT_EQ(BucketRules{.one_dtype = true}.Describe(), "one dtype per bucket");
  EXPECT_EQ((BucketRules{.close_after_bytes = 64 << 20}).Describe(), "close after 64 MiB");
  EXPECT_EQ((BucketRules{.one_dtype = true, .close_after_bytes = 64 << 20}).Describe(),
            "one dtype per bucket, close after 64 MiB");
  EXPECT_EQ((BucketRules{.close_after_bytes = 1ull << 30}).Describe(), "close after 1 GiB");
  EXPECT_EQ((BucketRules{.close_after_bytes = 3072}).Describe(), "close after 3 KiB");
  EXPECT_EQ((BucketRules{.close_after_bytes = 1000}).Describe(), "close after 1000 bytes");
}

TEST(BucketRules, CheckNamesTheFirstTensorOfAnotherDtype) {
  BucketManifest m{{T("a", "bfloat16", {4}, 0, 8), T("b", "bfloat16", {4}, 8, 8),
                    T("c", "float32", {2}, 16, 8), T("d", "int64", {1}, 24, 8)}};
  EXPECT_TRUE(CheckBucketRules(BucketRules{}, m).ok());
  absl::Status s = CheckBucketRules(BucketRules{.one_dtype = true}, m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'c' is float32 but the bucket's first tensor 'a' "
                                     "is bfloat16"));
  EXPECT_THAT(s.message(), HasSubstr("one dtype per bucket"));
  EXPECT_TRUE(CheckBucketRules(BucketRules{.one_dtype = true}, BucketManifest{}).ok());
}

TEST(BucketRules, CheckNamesATensorThatFollowsTheChunksEnd) {
  BucketManifest m{
      {T("a", "uint8", {60}, 0, 60), T("b", "uint8", {50}, 60, 50), T("c", "uint8", {1}, 110, 1)}};
  // 60 + 50 = 110 is past 100, so the bucket should have ended with b.
  absl::Status s = CheckBucketRules(BucketRules{.close_after_bytes = 100}, m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'c' follows 'b', which took the bucket to 110 bytes"));
  // 110 is not past 110; a bucket closed early is not something one bucket can show.
  EXPECT_TRUE(CheckBucketRules(BucketRules{.close_after_bytes = 110}, m).ok());
  EXPECT_TRUE(CheckBucketRules(BucketRules{.close_after_bytes = 1000}, m).ok());
}

TEST(BucketPlanner, RefusesInconsistentByteCounts) {
  TensorDesc bad{"t", DType::kFloat32, {3}, 10};
  BucketPlanner planner(100);
  auto r = planner.Add(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("are not 10 bytes"));
}

}  // namespace
}  // namespace wsync
