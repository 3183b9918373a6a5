// vLLM's /update_weights body on the IPC backend and the version gates that pick its form: one dict
// {GPU UUID: entry} per name (entry (FUNC, ARGS) or ARGS alone by version), or one dict for a
// packed uint8 chunk with tensor_sizes. Pickles are read back with tests/pickle's checker.

#include "daemon/engines/vllm/vllm_ipc_payload.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "daemon/engines/vllm/vllm_version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/pickle/pickle_checker.h"

namespace wsync {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

constexpr char kGpu0[] = "126c071a-1253-3d49-71ab-17c686b110d5";
constexpr char kGpu1[] = "226c071a-1253-3d49-71ab-17c686b110d5";

BucketManifest MixedBucket() {
  BucketManifest m;
  m.tensors = {TensorEntry{"a.weight", DType::kBfloat16, {2, 3}, 0, 12},
               TensorEntry{"b.bias", DType::kFloat32, {4}, 12, 16}};
  return m;
}

IpcBucketView View(const std::string& gpu, uint64_t offset = 0,
                   const std::string& shm = "/wsync-1-d0-0-ab") {
  return IpcBucketView{gpu, MemoryKind::kHostShm, shm, 1 << 20, offset, ""};
}

VllmVariant VariantOf(const std::string& version) {
  auto parsed = ParseVllmVersion(version);
  EXPECT_TRUE(parsed.ok()) << version;
  auto variant = VllmVariantFor(*parsed);
  EXPECT_TRUE(variant.ok()) << variant.status();
  return *variant;
}

std::string Pickle(const nlohmann::json& body) {
  std::string raw;
  EXPECT_TRUE(
      absl::Base64Unescape(body["update_info"]["ipc_handles_pickled"].get<std::string>(), &raw));
  return raw;
}

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

TEST(VllmVersion, GenerationsFollowTheReleasesThatChangedTheWire) {
  const VllmVariant old = VariantOf("0.17.0");
  EXPECT_EQ(old.entry_form, VllmEntryForm::kFuncArgs);
  EXPECT_FALSE(old.session_routes);
  EXPECT_FALSE(old.packed_ipc);
  EXPECT_FALSE(old.finish_weight_version);
  EXPECT_EQ(VariantOf("0.21.9+cu130").entry_form, VllmEntryForm::kFuncArgs);
  // A pre-release orders before its release.
  EXPECT_EQ(VariantOf("0.22.0rc2").entry_form, VllmEntryForm::kFuncArgs);
  EXPECT_EQ(VariantOf("0.22.0.dev41+g1234abc").entry_form, VllmEntryForm::kFuncArgs);
  const VllmVariant mid = VariantOf("0.22.0");
  EXPECT_EQ(mid.entry_form, VllmEntryForm::kArgsOnly);
  EXPECT_TRUE(mid.session_routes);
  EXPECT_TRUE(mid.packed_ipc);
  EXPECT_FALSE(mid.finish_weight_version);
  EXPECT_EQ(VariantOf("0.22.1.dev3+gabc").entry_form, VllmEntryForm::kArgsOnly);
  const VllmVariant newest = VariantOf("v0.29.0");
  EXPECT_TRUE(newest.finish_weight_version);
  EXPECT_TRUE(VariantOf("1.0.0").finish_weight_version);
  EXPECT_NE(old.name, mid.name);
  EXPECT_NE(mid.name, newest.name);
}

TEST(VllmVersion, AServerWithoutIpcIsRefusedNamingBothVersions) {
  for (const char* text : {"0.16.2", "0.17.0rc1", "0.9.2"}) {
    auto version = ParseVllmVersion(text);
    ASSERT_TRUE(version.ok()) << text;
    auto variant = VllmVariantFor(*version);
    EXPECT_EQ(variant.status().code(), absl::StatusCode::kFailedPrecondition) << text;
    EXPECT_THAT(variant.status().message(), HasSubstr(text));
    EXPECT_THAT(variant.status().message(), HasSubstr(">= 0.17.0"));
  }
  for (const char* bad : {"", "latest", "0", ".1.2", "x0.22.1"}) {
    EXPECT_FALSE(ParseVllmVersion(bad).ok()) << bad;
  }
}

TEST(VllmIpcPayload, UnpackedOldBuildsGetOneDictPerNameOfFuncArgsPairs) {
  auto body = VllmIpcBucketBody(MixedBucket(), {View(kGpu0), View(kGpu1, 0, "/wsync-1-d1-0-cd")},
                                VariantOf("0.17.1"), /*packed=*/false, BucketContext{});
  ASSERT_TRUE(body.ok()) << body.status();
  const nlohmann::json& info = (*body)["update_info"];
  EXPECT_EQ(info["names"], nlohmann::json({"a.weight", "b.bias"}));
  EXPECT_EQ(info["dtype_names"], nlohmann::json({"bfloat16", "float32"}));
  EXPECT_EQ(info["shapes"], nlohmann::json({{2, 3}, {4}}));
  EXPECT_FALSE(info.contains("packed")) << "older builds refuse fields they do not know";
  EXPECT_FALSE(info.contains("tensor_sizes"));
  const std::string pickle = Pickle(*body);
  auto checked = CheckTorchIpcPickle(pickle);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->top_kind, "list");
  EXPECT_THAT(checked->globals,
              Contains(Pair("torch.multiprocessing.reductions", "rebuild_cuda_tensor")));
  // Two names x two GPUs: four (FUNC, ARGS) entries, each keyed by its GPU's UUID.
  EXPECT_EQ(Count(pickle, "rebuild_cuda_tensor"), 4u);
  EXPECT_EQ(Count(pickle, kGpu0), 2u);
  EXPECT_EQ(Count(pickle, kGpu1), 2u);
  EXPECT_TRUE(absl::StrContains(pickle, "/wsync-1-d1-0-cd")) << "GPU 1's own slot";
}

TEST(VllmIpcPayload, UnpackedNewBuildsGetTheArgsAlone) {
  auto body = VllmIpcBucketBody(MixedBucket(), {View(kGpu0, 64)}, VariantOf("0.22.1"),
                                /*packed=*/false, BucketContext{});
  ASSERT_TRUE(body.ok()) << body.status();
  const std::string pickle = Pickle(*body);
  auto checked = CheckTorchIpcPickle(pickle);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->top_kind, "list");
  EXPECT_THAT(checked->globals,
              Not(Contains(Pair("torch.multiprocessing.reductions", "rebuild_cuda_tensor"))));
  EXPECT_THAT(checked->globals, Contains(Pair("torch", "bfloat16")));
  EXPECT_THAT(checked->globals, Contains(Pair("torch", "float32")));
  EXPECT_FALSE((*body)["update_info"].contains("packed"));
}

TEST(VllmIpcPayload, PackedIsOneDictForAUint8ChunkWithTensorSizes) {
  auto body =
      VllmIpcBucketBody(MixedBucket(), {View(kGpu0, 128), View(kGpu1, 128)}, VariantOf("0.22.1"),
                        /*packed=*/true, BucketContext{"u", "v", 0, /*last=*/false});
  ASSERT_TRUE(body.ok()) << body.status();
  const nlohmann::json& info = (*body)["update_info"];
  EXPECT_EQ(info["tensor_sizes"], nlohmann::json({12, 16}));
  EXPECT_EQ(info["packed"], true);
  EXPECT_EQ(info["first_chunk"], true);
  EXPECT_EQ(info["last_chunk"], false);
  const std::string pickle = Pickle(*body);
  auto checked = CheckTorchIpcPickle(pickle);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->top_kind, "dict");
  EXPECT_THAT(checked->globals, Contains(Pair("torch", "uint8")));
  EXPECT_THAT(checked->globals, Not(Contains(Pair("torch", "float32"))))
      << "the chunk is bytes; dtypes travel in dtype_names";
  auto later = VllmIpcBucketBody(MixedBucket(), {View(kGpu0)}, VariantOf("0.22.1"), true,
                                 BucketContext{"u", "v", 3, /*last=*/true});
  ASSERT_TRUE(later.ok());
  EXPECT_EQ((*later)["update_info"]["first_chunk"], false);
  EXPECT_EQ((*later)["update_info"]["last_chunk"], true);
}

TEST(VllmIpcPayload, PackedNeedsABuildThatReadsItAndABucketWithoutGaps) {
  auto old =
      VllmIpcBucketBody(MixedBucket(), {View(kGpu0)}, VariantOf("0.20.0"), true, BucketContext{});
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  BucketManifest gap = MixedBucket();
  gap.tensors[1].offset = 16;
  auto gapped = VllmIpcBucketBody(gap, {View(kGpu0)}, VariantOf("0.22.1"), true, BucketContext{});
  EXPECT_EQ(gapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gapped.status().message(), HasSubstr("'b.bias' starts at byte 16"));
  EXPECT_TRUE(VllmCheckPackedLayout(MixedBucket()).ok());
  EXPECT_FALSE(VllmCheckPackedLayout(BucketManifest{}).ok());
}

TEST(VllmIpcPayload, EveryRanksUuidIsInEveryDictOrNothingIsBuilt) {
  // A rank without a UUID would find no entry and kill the engine (hazard 4.5).
  auto missing = VllmIpcBucketBody(MixedBucket(), {View(kGpu0), View("")}, VariantOf("0.22.1"),
                                   false, BucketContext{});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("TP rank 1 has no GPU UUID"));
  // Ranks on one GPU read its one entry: the same memory, or refused.
  auto clash = VllmIpcBucketBody(MixedBucket(), {View(kGpu0, 0), View(kGpu0, 64)},
                                 VariantOf("0.22.1"), false, BucketContext{});
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(clash.status().message(), HasSubstr("sees other memory"));
  auto shared = VllmIpcBucketBody(MixedBucket(), {View(kGpu0), View(kGpu0)}, VariantOf("0.22.1"),
                                  false, BucketContext{});
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(Count(Pickle(*shared), kGpu0), 2u) << "one key per name, not per rank";
  EXPECT_FALSE(VllmIpcBucketBody(BucketManifest{}, {View(kGpu0)}, VariantOf("0.22.1"), false,
                                 BucketContext{})
                   .ok());
  EXPECT_FALSE(
      VllmIpcBucketBody(MixedBucket(), {}, VariantOf("0.22.1"), false, BucketContext{}).ok());
}

TEST(VllmIpcPayload, ATensorOffTheBoundaryOfItsDtypeIsRefused) {
  // Unpacked, each view's offset is in elements of its dtype.
  auto odd = VllmIpcBucketBody(MixedBucket(), {View(kGpu0, 2)}, VariantOf("0.22.1"), false,
                               BucketContext{});
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(odd.status().message(), HasSubstr("not on a float32 boundary"));
}

}  // namespace
}  // namespace wsync
