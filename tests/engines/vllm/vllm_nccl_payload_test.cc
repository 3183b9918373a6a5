// vLLM's NCCL backend as wsyncd writes it: the init and update bodies of each generation (fields
// exactly where that generation's dataclasses read them, since they refuse unknown keys), the
// packed chunk cut of packed_tensor.py, and the pickled ncclUniqueId its StatelessProcessGroup
// reads from the store.

#include "daemon/engines/vllm/vllm_nccl_payload.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "daemon/engines/vllm/vllm_adapter.h"
#include "daemon/transport/broadcast/torch_store_rendezvous.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

VllmVariant Variant(const char* version) {
  auto v = VllmNcclVariantFor(*ParseVllmVersion(version));
  EXPECT_TRUE(v.ok()) << v.status();
  return *v;
}

VllmOptions Options(bool packed, VllmRendezvous rendezvous = VllmRendezvous::kStore,
                    uint64_t chunk = kVllmDefaultPackedChunkBytes) {
  return VllmOptions(packed, VllmPauseMode::kKeep, false, true, rendezvous, chunk);
}

std::string Id() {
  std::string id(128, '\0');
  for (int i = 0; i < 128; ++i) id[i] = static_cast<char>(i * 7 + 3);
  return id;
}

Rendezvous StoreRdv() {
  return Rendezvous{"10.0.0.5", 41234, 5, "policy", RendezvousMode::kStatelessStore, ""};
}

TEST(VllmNcclInitBody, StoreModeBefore028CarriesNoPackedFields) {
  auto body = VllmNcclInitBody(StoreRdv(), EngineEndpoint{"http://e:1", 2, 3}, Variant("0.27.1"),
                               Options(true));
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, json({{"init_info",
                          {{"rank_offset", 3},
                           {"world_size", 5},
                           {"master_address", "10.0.0.5"},
                           {"master_port", 41234}}}}));
}

TEST(VllmNcclInitBody, From028PackedAndItsSizesGoInInitInfo) {
  auto body = VllmNcclInitBody(StoreRdv(), EngineEndpoint{"http://e:1", 1, 1}, Variant("0.28.0"),
                               Options(true, VllmRendezvous::kStore, 4096));
  ASSERT_TRUE(body.ok());
  const json& info = (*body)["init_info"];
  EXPECT_EQ(info["packed"], true);
  EXPECT_EQ(info["packed_buffer_size_bytes"], 4096);
  EXPECT_EQ(info["packed_num_buffers"], 2);
  auto unpacked = VllmNcclInitBody(StoreRdv(), EngineEndpoint{"http://e:1", 1, 1},
                                   Variant("0.28.0"), Options(false));
  EXPECT_EQ((*unpacked)["init_info"]["packed"], false);
  EXPECT_FALSE((*unpacked)["init_info"].contains("packed_buffer_size_bytes"));
}

TEST(VllmNcclInitBody, UniqueIdModeSendsPaddedStandardBase64AndNoStore) {
  Rendezvous rdv{"", 0, 3, "policy", RendezvousMode::kUniqueIdInInit, Id()};
  auto body = VllmNcclInitBody(rdv, EngineEndpoint{"http://e:1", 2, 1}, Variant("0.30.0"),
                               Options(false, VllmRendezvous::kUniqueId));
  ASSERT_TRUE(body.ok()) << body.status();
  const json& info = (*body)["init_info"];
  EXPECT_FALSE(info.contains("master_address"));
  EXPECT_FALSE(info.contains("master_port"));
  const std::string b64 = info["nccl_unique_id_b64"].get<std::string>();
  EXPECT_EQ(b64.size(), 172u);
  EXPECT_EQ(b64.back(), '=');
  EXPECT_EQ(b64.find_first_of("-_"), std::string::npos) << "not URL-safe base64";
  std::string decoded;
  ASSERT_TRUE(absl::Base64Unescape(b64, &decoded));
  EXPECT_EQ(decoded, Id());
  // A generation without the field is refused rather than sent a key its dataclass rejects.
  auto old = VllmNcclInitBody(rdv, EngineEndpoint{"http://e:1", 2, 1}, Variant("0.29.0"),
                              Options(false, VllmRendezvous::kUniqueId));
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
}

BucketManifest Bucket(std::vector<uint64_t> lengths) {
  BucketManifest m;
  uint64_t offset = 0;
  int i = 0;
  for (uint64_t n : lengths) {
    m.tensors.push_back(TensorEntry{
        "t" + std::to_string(i++), DType::kUint8, {static_cast<int64_t>(n)}, offset, n});
    offset += n;
  }
  return m;
}

TEST(VllmNcclBucketBody, PackedRidesInUpdateInfoOnlyBefore028) {
  BucketManifest m;
  m.tensors = {TensorEntry{"a.weight", DType::kBfloat16, {2, 3}, 0, 12},
               TensorEntry{"b.bias", DType::kFloat32, {3}, 12, 12}};
  json old = VllmNcclBucketBody(m, Variant("0.20.0"), Options(true, VllmRendezvous::kStore, 64));
  EXPECT_EQ(old, json({{"update_info",
                        {{"names", {"a.weight", "b.bias"}},
                         {"dtype_names", {"bfloat16", "float32"}},
                         {"shapes", {{2, 3}, {3}}},
                         {"packed", true},
                         {"packed_buffer_size_bytes", 64},
                         {"packed_num_buffers", 2}}}}));
  json now = VllmNcclBucketBody(m, Variant("0.30.0"), Options(true));
  EXPECT_EQ(now, json({{"update_info",
                        {{"names", {"a.weight", "b.bias"}},
                         {"dtype_names", {"bfloat16", "float32"}},
                         {"shapes", {{2, 3}, {3}}}}}}));
}

std::vector<uint64_t> ChunkBytes(const std::vector<BroadcastPiece>& pieces) {
  std::vector<uint64_t> out;
  for (const BroadcastPiece& p : pieces) {
    EXPECT_EQ(p.dtype, DType::kUint8);
    out.push_back(p.bytes());
  }
  return out;
}

TEST(VllmNcclPieces, AChunkClosesRightAfterTheTensorThatTakesItPastTheSize) {
  using ::testing::ElementsAre;
  // 60+50 = 110 > 100 closes after t1; 10+100 closes after t3; 5 is the last chunk.
  auto pieces = VllmNcclPieces(Bucket({60, 50, 10, 100, 5}), true, 100);
  ASSERT_TRUE(pieces.ok()) << pieces.status();
  EXPECT_THAT(ChunkBytes(*pieces), ElementsAre(110, 110, 5));
  EXPECT_EQ((*pieces)[1].offset, 110u);
  EXPECT_EQ((*pieces)[2].offset, 220u);
  // Exactly the size does not close it (strictly greater).
  EXPECT_THAT(ChunkBytes(*VllmNcclPieces(Bucket({50, 50, 1}), true, 100)), ElementsAre(101));
  EXPECT_THAT(ChunkBytes(*VllmNcclPieces(Bucket({50, 50}), true, 100)), ElementsAre(100));
  // A tensor larger than the size is a chunk of its own.
  EXPECT_THAT(ChunkBytes(*VllmNcclPieces(Bucket({300, 1}), true, 100)), ElementsAre(300, 1));
  // An empty tensor after a close still makes a (0-byte) chunk, as the consumer posts one.
  EXPECT_THAT(ChunkBytes(*VllmNcclPieces(Bucket({101, 0}), true, 100)), ElementsAre(101, 0));
}

TEST(VllmNcclPieces, UnpackedIsOneTypedBroadcastPerTensorAndPackedNeedsNoGaps) {
  BucketManifest m;
  m.tensors = {TensorEntry{"a", DType::kBfloat16, {2, 3}, 0, 12},
               TensorEntry{"b", DType::kFloat32, {3}, 12, 12}};
  auto pieces = VllmNcclPieces(m, false, 100);
  ASSERT_TRUE(pieces.ok());
  ASSERT_EQ(pieces->size(), 2u);
  EXPECT_EQ((*pieces)[0].dtype, DType::kBfloat16);
  EXPECT_EQ((*pieces)[0].count, 6u);
  EXPECT_EQ((*pieces)[1].dtype, DType::kFloat32);
  EXPECT_EQ((*pieces)[1].offset, 12u);
  EXPECT_EQ((*pieces)[1].count, 3u);
  m.tensors[1].offset = 16;
  auto gap = VllmNcclPieces(m, true, 100);
  EXPECT_EQ(gap.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(VllmStoreRendezvous, TheIdPickleIsCtypesUnpickleOfVllmsNcclUniqueId) {
  auto pickle = TorchStoreRendezvous::VllmUniqueIdPickle(Id());
  ASSERT_TRUE(pickle.ok()) << pickle.status();
  // docs/engines/tcpstore.md's (vLLM) accepted recipe, at protocol 3 (the same opcodes).
  const std::string expect =
      std::string("\x80\x03", 2) + "c_ctypes\n_unpickle\n" +
      "cvllm.distributed.device_communicators.pynccl_wrapper\nncclUniqueId\n" + "}" +
      std::string("C\x80", 2) + Id() + std::string("\x86\x86R.", 4);
  EXPECT_EQ(*pickle, expect);
  EXPECT_EQ(pickle->size(), 223u);
  EXPECT_EQ(std::string(TorchStoreRendezvous::kVllmIdKey).size(), 19u);
  EXPECT_EQ(TorchStoreRendezvous::VllmUniqueIdPickle("short").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace wsync
