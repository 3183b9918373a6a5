// The body wsyncd posts to SGLang's /update_weights_from_tensor: one base64 pickle per TP rank,
// each naming its rank's GPU and wsyncd's allocation as one storage. The pickles are read back
// with tests/pickle's checker, written apart from the writer.

#include "daemon/engines/sglang/sglang_ipc_payload.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "common/host/host_platform.h"
#include "common/torch_ipc/ipc_handle.h"
#include "daemon/transport/ipc/ipc_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/pickle/pickle_checker.h"

namespace wsync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

BucketManifest TwoTensors() {
  BucketManifest m;
  m.tensors = {TensorEntry{"a.weight", DType::kBfloat16, {2, 3}, 0, 12},
               TensorEntry{"b.bias", DType::kFloat32, {4}, 12, 16}};
  return m;
}

IpcBucketView View(const std::string& gpu, const std::string& handle = "/wsync-1-d0-0-ab") {
  return IpcBucketView{gpu, MemoryKind::kHostShm, handle, 1 << 20, 4096, ""};
}

std::string Decoded(const nlohmann::json& entry) {
  std::string raw;
  EXPECT_TRUE(absl::Base64Unescape(entry.get<std::string>(), &raw));
  return raw;
}

TEST(SglangIpcPayload, OnePicklePerRankNamingItsOwnGpu) {
  const std::string gpu0 = "126c071a-1253-3d49-71ab-17c686b110d5";
  const std::string gpu1 = "226c071a-1253-3d49-71ab-17c686b110d5";
  auto body = SglangIpcBucketBody(TwoTensors(), {View(gpu0), View(gpu1)}, BucketFormat::kFlattened);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ((*body)["load_format"], "flattened_bucket");
  EXPECT_EQ((*body)["flush_cache"], false);
  ASSERT_EQ((*body)["serialized_named_tensors"].size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string pickle = Decoded((*body)["serialized_named_tensors"][rank]);
    auto checked = CheckTorchIpcPickle(pickle);
    ASSERT_TRUE(checked.ok()) << checked.status();
    EXPECT_EQ(checked->top_kind, "dict");
    // Only names SGLang's exact-name unpickler accepts; the metadata under tensor_bucket.
    EXPECT_THAT(checked->globals, testing::Contains(Pair("sglang.srt.weight_sync.tensor_bucket",
                                                         "FlattenedTensorMetadata")));
    EXPECT_THAT(checked->globals,
                testing::Contains(Pair("torch.multiprocessing.reductions", "rebuild_cuda_tensor")));
    EXPECT_TRUE(absl::StrContains(pickle, rank == 0 ? gpu0 : gpu1));
    EXPECT_FALSE(absl::StrContains(pickle, rank == 0 ? gpu1 : gpu0));
    // Host mode's handle: the shm name, NUL-padded to the 64 bytes of a cudaIpcMemHandle_t.
    EXPECT_TRUE(absl::StrContains(pickle, std::string("\x43\x40/wsync-1-d0-0-ab\0", 19)));
  }
}

TEST(SglangIpcPayload, PerTensorViewsAreListsOfNamedTensorsInTheirDtypes) {
  auto body = SglangIpcBucketBody(TwoTensors(), {View("126c071a-1253-3d49-71ab-17c686b110d5")},
                                  BucketFormat::kPerTensor);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_TRUE((*body)["load_format"].is_null());
  auto checked = CheckTorchIpcPickle(Decoded((*body)["serialized_named_tensors"][0]));
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->top_kind, "list");
  EXPECT_THAT(checked->globals, testing::Contains(Pair("torch", "bfloat16")));
  EXPECT_THAT(checked->globals, testing::Contains(Pair("torch", "float32")));
  // A view that does not start on its dtype's boundary cannot be a tensor of that dtype.
  IpcBucketView odd = View("126c071a-1253-3d49-71ab-17c686b110d5");
  odd.offset = 4097;
  EXPECT_THAT(SglangIpcBucketBody(TwoTensors(), {odd}, BucketFormat::kPerTensor).status().message(),
              HasSubstr("not on a bfloat16 boundary"));
}

TEST(SglangIpcPayload, HandlesAreTheirSizeOrRefused) {
  IpcBucketView cuda = View("126c071a-1253-3d49-71ab-17c686b110d5", std::string(64, '\x07'));
  cuda.memory_kind = MemoryKind::kCudaIpc;
  EXPECT_EQ(IpcHandleBytes(IpcBucketMemoryOf(cuda)).value(), std::string(64, '\x07'));
  cuda.memory_handle.pop_back();
  EXPECT_EQ(IpcHandleBytes(IpcBucketMemoryOf(cuda)).status().code(), absl::StatusCode::kInternal);
  IpcBucketView long_name = View("x", std::string(65, 'n'));
  EXPECT_EQ(IpcHandleBytes(IpcBucketMemoryOf(long_name)).status().code(),
            absl::StatusCode::kInternal);
  // An event handle makes the rank wait for the trainer's writes.
  IpcBucketView with_event = View("126c071a-1253-3d49-71ab-17c686b110d5");
  with_event.event_handle = std::string(64, '\x05');
  auto body = SglangIpcBucketBody(TwoTensors(), {with_event}, BucketFormat::kFlattened);
  ASSERT_TRUE(body.ok());
  EXPECT_TRUE(absl::StrContains(Decoded((*body)["serialized_named_tensors"][0]),
                                std::string("\x43\x40") + std::string(64, '\x05') + "\x88"));
}

TEST(DeviceUuids, HostDevicesAreFoundByUuidInEitherForm) {
  HostPlatform host("127.0.0.1", "127.0.0.1");
  EXPECT_EQ(FindDeviceByUuid(host, HostDeviceUuid(3)).value(), 3);
  EXPECT_EQ(FindDeviceByUuid(host, "GPU-" + HostDeviceUuid(5)).value(), 5);
  auto missing = FindDeviceByUuid(host, "GPU-12345678-1234-1234-1234-123456789abc");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("no device on GPU GPU-12345678-1234-1234-1234-123456789abc"));
  EXPECT_EQ(NormalizeGpuUuid("GPU-ABCDEF01-1253-3d49-71ab-17c686b110d5"),
            "abcdef01-1253-3d49-71ab-17c686b110d5");
}

}  // namespace
}  // namespace wsync
