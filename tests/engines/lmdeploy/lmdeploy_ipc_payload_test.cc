// The body wsyncd posts to LMDeploy's /update_weights: one base64 pickle per TP rank, the slot
// typed as the bucket's one dtype with metadata in elements, or one view per tensor. The pickles
// are read back with tests/pickle's checker, written apart from the writer.

#include "daemon/engines/lmdeploy/lmdeploy_ipc_payload.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
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

// Two bf16 tensors back to back: 6 elements, then 4.
BucketManifest Bf16Bucket() {
  BucketManifest m;
  m.tensors = {TensorEntry{"a.weight", DType::kBfloat16, {2, 3}, 0, 12},
               TensorEntry{"a.bias", DType::kBfloat16, {4}, 12, 8}};
  return m;
}

BucketManifest MixedBucket() {
  BucketManifest m;
  m.tensors = {TensorEntry{"a.weight", DType::kBfloat16, {2, 3}, 0, 12},
               TensorEntry{"b.bias", DType::kFloat32, {4}, 12, 16}};
  return m;
}

IpcBucketView View(const std::string& gpu, uint64_t offset = 0) {
  return IpcBucketView{gpu, MemoryKind::kHostShm, "/wsync-1-d0-0-ab", 1 << 20, offset, ""};
}

std::string Decoded(const nlohmann::json& entry) {
  std::string raw;
  EXPECT_TRUE(absl::Base64Unescape(entry.get<std::string>(), &raw));
  return raw;
}

// A protocol-3 BININT1 after a short BINUNICODE key: `key` then its value.
std::string KeyAndSmallInt(const std::string& key, char value) {
  return std::string("X") + std::string(1, static_cast<char>(key.size())) + std::string(3, '\0') +
         key + "K" + std::string(1, value);
}

TEST(LmdeployIpcPayload, FlattenedIsTheSlotTypedAsTheBucketsDtypeWithMetadataInElements) {
  auto body = LmdeployIpcBucketBody(Bf16Bucket(), {View(kGpu0), View(kGpu1)},
                                    BucketFormat::kFlattened, /*finished=*/false);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ((*body)["load_format"], "flattened_bucket");
  EXPECT_EQ((*body)["finished"], false);
  EXPECT_EQ(body->size(), 3u) << body->dump();
  ASSERT_EQ((*body)["serialized_named_tensors"].size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string pickle = Decoded((*body)["serialized_named_tensors"][rank]);
    auto checked = CheckTorchIpcPickle(pickle);
    ASSERT_TRUE(checked.ok()) << checked.status();
    EXPECT_EQ(checked->top_kind, "dict");
    EXPECT_THAT(checked->globals, Contains(Pair("lmdeploy.utils", "FlattenedTensorMetadata")));
    EXPECT_THAT(checked->globals,
                Contains(Pair("torch.multiprocessing.reductions", "rebuild_cuda_tensor")));
    EXPECT_THAT(checked->globals, Contains(Pair("torch", "bfloat16")));
    EXPECT_THAT(checked->globals, Not(Contains(Pair("torch", "uint8"))));
    // The flattened tensor: the whole allocation, 1 MiB as 524288 bf16 elements.
    EXPECT_TRUE(absl::StrContains(pickle, std::string("ctorch\nSize\nJ\0\0\x08\0\x85\x85R", 20)));
    // The second entry starts at element 6 and ends at element 10, not at bytes 12 and 20.
    EXPECT_TRUE(absl::StrContains(pickle, KeyAndSmallInt("start_idx", 6)));
    EXPECT_TRUE(absl::StrContains(pickle, KeyAndSmallInt("end_idx", 10)));
    EXPECT_TRUE(absl::StrContains(pickle, KeyAndSmallInt("numel", 4)));
    // The device is an index (LMDeploy sets its own), never the GPU's UUID.
    EXPECT_FALSE(absl::StrContains(pickle, kGpu0));
    // Host mode: the shm name, NUL-padded to 64 bytes; no event, so 64 zero bytes.
    EXPECT_TRUE(absl::StrContains(pickle, std::string("\x43\x40/wsync-1-d0-0-ab\0", 19)));
    EXPECT_TRUE(absl::StrContains(
        pickle, std::string("X\x10\0\0\0event_ipc_handleC@", 23) + std::string(64, '\0')));
    EXPECT_TRUE(absl::StrContains(pickle, std::string("X\x0d\0\0\0require_clone\x89", 19)));
  }
}

// A little-endian BININT after a short BINUNICODE key.
std::string KeyAndInt(const std::string& key, uint32_t value) {
  std::string out = std::string("X") + std::string(1, static_cast<char>(key.size())) +
                    std::string(3, '\0') + key + "J";
  for (int i = 0; i < 4; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
  return out;
}

TEST(LmdeployIpcPayload, TheTensorViewsTheWholeAllocationAndMetadataIndexesTheSlotsRegion) {
  // The second of two 2 MiB slots of one 4 MiB allocation.
  IpcBucketView view = View(kGpu0, 2 << 20);
  view.allocation_bytes = 4 << 20;
  auto body = LmdeployIpcBucketBody(Bf16Bucket(), {view}, BucketFormat::kFlattened, false);
  ASSERT_TRUE(body.ok()) << body.status();
  std::string pickle = Decoded((*body)["serialized_named_tensors"][0]);
  ASSERT_TRUE(CheckTorchIpcPickle(pickle).ok());
  // 4 MiB are 2097152 bf16 elements; the slot starts at element 1048576.
  EXPECT_TRUE(absl::StrContains(pickle, std::string("ctorch\nSize\nJ\0\0\x20\0\x85\x85R", 20)));
  EXPECT_TRUE(absl::StrContains(pickle, KeyAndInt("start_idx", (1 << 20) + 6)));
  EXPECT_TRUE(absl::StrContains(pickle, KeyAndInt("end_idx", (1 << 20) + 10)));
  EXPECT_TRUE(absl::StrContains(pickle, "flattened_tensor"));
  // Left out for a rank whose worker holds it already: metadata, require_clone and the event go.
  body = LmdeployIpcBucketBody(Bf16Bucket(), {view}, BucketFormat::kFlattened, false, {false});
  ASSERT_TRUE(body.ok()) << body.status();
  pickle = Decoded((*body)["serialized_named_tensors"][0]);
  ASSERT_TRUE(CheckTorchIpcPickle(pickle).ok());
  EXPECT_FALSE(absl::StrContains(pickle, "flattened_tensor"));
  EXPECT_FALSE(absl::StrContains(pickle, "rebuild_cuda_tensor"));
  EXPECT_TRUE(absl::StrContains(pickle, KeyAndInt("start_idx", (1 << 20) + 6)));
  EXPECT_TRUE(absl::StrContains(pickle, "event_ipc_handle"));
  // A bucket running past its allocation is refused.
  view.allocation_bytes = (2 << 20) + 8;
  EXPECT_EQ(
      LmdeployIpcBucketBody(Bf16Bucket(), {view}, BucketFormat::kFlattened, false).status().code(),
      absl::StatusCode::kOutOfRange);
}

TEST(LmdeployIpcPayload, TheSlotsEventIsWaitedOnTwice) {
  IpcBucketView view = View(kGpu0);
  view.memory_kind = MemoryKind::kCudaIpc;
  view.memory_handle = std::string(64, '\x07');
  view.event_handle = std::string(64, '\x05');
  auto body = LmdeployIpcBucketBody(Bf16Bucket(), {view}, BucketFormat::kFlattened, true);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ((*body)["finished"], true);
  const std::string pickle = Decoded((*body)["serialized_named_tensors"][0]);
  // In the rebuild arguments with event_sync_required True, and as event_ipc_handle.
  EXPECT_TRUE(absl::StrContains(pickle, "C@" + std::string(64, '\x05') + "\x88"));
  EXPECT_TRUE(absl::StrContains(pickle, "event_ipc_handleC@" + std::string(64, '\x05')));
  // A CUDA slot without an event would have LMDeploy open 64 zero bytes as one.
  view.event_handle.clear();
  EXPECT_THAT(LmdeployIpcBucketBody(Bf16Bucket(), {view}, BucketFormat::kFlattened, false)
                  .status()
                  .message(),
              HasSubstr("without an IPC event"));
}

TEST(LmdeployIpcPayload, AFlattenedBucketHoldsOneDtype) {
  auto mixed = LmdeployIpcBucketBody(MixedBucket(), {View(kGpu0)}, BucketFormat::kFlattened, false);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mixed.status().message(), HasSubstr("tensor 'b.bias' is float32 in a bfloat16"));
  EXPECT_THAT(mixed.status().message(), HasSubstr(kGpu0));
  EXPECT_EQ(LmdeployBucketDtype(Bf16Bucket()).value(), DType::kBfloat16);
  // A slot offset that is not whole elements cannot start a typed view.
  EXPECT_THAT(
      LmdeployIpcBucketBody(Bf16Bucket(), {View(kGpu0, 4097)}, BucketFormat::kFlattened, false)
          .status()
          .message(),
      HasSubstr("not on a bfloat16 boundary"));
}

TEST(LmdeployIpcPayload, PerTensorIsAListOfNamedRebuildPairsInTheirOwnDtypes) {
  auto body =
      LmdeployIpcBucketBody(MixedBucket(), {View(kGpu0, 4096)}, BucketFormat::kPerTensor, false);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_TRUE((*body)["load_format"].is_null());
  const std::string pickle = Decoded((*body)["serialized_named_tensors"][0]);
  auto checked = CheckTorchIpcPickle(pickle);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->top_kind, "list");
  EXPECT_THAT(checked->globals, Contains(Pair("torch", "bfloat16")));
  EXPECT_THAT(checked->globals, Contains(Pair("torch", "float32")));
  EXPECT_THAT(checked->globals, Not(Contains(Pair("lmdeploy.utils", "FlattenedTensorMetadata"))));
  // (FUNC, ARGS) pairs, not reduced tensors: the rebuild arguments' tuple closes with TUPLE and
  // the pair with TUPLE2, never REDUCE.
  EXPECT_FALSE(absl::StrContains(pickle, "tR")) << "a tensor was reduced, not paired";
  EXPECT_TRUE(absl::StrContains(pickle, "t\x86"));
  // b.bias at slot byte 4096 + 12: float32 element 1027.
  EXPECT_TRUE(absl::StrContains(pickle, "M\x03\x04"));
}

TEST(LmdeployIpcPayload, AFinishOnlyRequestListsNothingForEveryRank) {
  for (BucketFormat format : {BucketFormat::kFlattened, BucketFormat::kPerTensor}) {
    auto body = LmdeployFinishOnlyBody(3, format);
    ASSERT_TRUE(body.ok()) << body.status();
    EXPECT_EQ((*body)["finished"], true);
    ASSERT_EQ((*body)["serialized_named_tensors"].size(), 3u);
    const std::string pickle = Decoded((*body)["serialized_named_tensors"][2]);
    auto checked = CheckTorchIpcPickle(pickle);
    ASSERT_TRUE(checked.ok()) << checked.status();
    EXPECT_EQ(checked->top_kind, format == BucketFormat::kFlattened ? "dict" : "list");
    // Nothing to rebuild: no tensor, no storage, no handle.
    EXPECT_TRUE(checked->globals.empty()) << pickle;
  }
  EXPECT_FALSE(LmdeployFinishOnlyBody(0, BucketFormat::kFlattened).ok());
}

}  // namespace
}  // namespace wsync
