// Writes one pickle per engine payload (daemon/engines/<kind>/<kind>_ipc_pickle.h) into a folder,
// for tests/pickle/check_torch_pickles.py to disassemble and load with an exact-name unpickler.
// The inputs below are fixed, and the script states them again on its side: change both
// together.
//
//   write_torch_pickles OUT_DIR

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/torch_ipc/pickle_writer.h"
#include "common/torch_ipc/torch_ipc_pickle.h"
#include "daemon/engines/lmdeploy/lmdeploy_ipc_pickle.h"
#include "daemon/engines/sglang/sglang_ipc_pickle.h"
#include "daemon/engines/vllm/vllm_ipc_pickle.h"

namespace wsync {
namespace {

constexpr uint64_t kStorage = uint64_t{1} << 20;
constexpr const char* kUuid0 = "126c071a-1253-3d49-71ab-17c686b110d5";
constexpr const char* kUuid1 = "8f0e5d1c-0000-4a4b-9c9d-0123456789ab";

// bytes(range(first, first + 64)) in the script.
std::string Bytes64(int first) {
  std::string b(kCudaIpcHandleBytes, '\0');
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>(first + i);
  return b;
}

const std::string kHandleA = Bytes64(0x10);
const std::string kHandleB = Bytes64(0x50);
const std::string kEvent = Bytes64(0xa0);

CudaIpcTensor Tensor(const char* dtype, std::vector<int64_t> shape, uint64_t element_offset,
                     const std::string& handle, CudaDevice device, uint64_t storage = kStorage) {
  CudaIpcTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.element_offset = element_offset;
  t.storage_size_bytes = storage;
  t.ipc_handle = handle;
  t.device = std::move(device);
  return t;
}

bool Write(const std::string& dir, const char* name, const absl::StatusOr<std::string>& pickle) {
  if (!pickle.ok()) {
    std::fprintf(stderr, "write_torch_pickles: %s: %s\n", name, pickle.status().ToString().c_str());
    return false;
  }
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(pickle->data(), static_cast<std::streamsize>(pickle->size()));
  return static_cast<bool>(out);
}

// SGLang null, one payload per TP rank: rank r's tensors live on GPU r, named by its UUID. Rank
// 0 also has the consumer wait on wsyncd's event.
absl::StatusOr<std::string> SglangNullRank(int rank) {
  const std::string& handle = rank == 0 ? kHandleA : kHandleB;
  const char* uuid = rank == 0 ? kUuid0 : kUuid1;
  std::vector<NamedCudaTensor> tensors = {
      {"model.layers.0.mlp.gate_up_proj.weight",
       Tensor("bfloat16", {4, 8}, 0, handle, std::string(uuid))},
      {"model.norm.weight", Tensor("bfloat16", {8}, 32, handle, std::string(uuid))}};
  if (rank == 0) {
    for (NamedCudaTensor& t : tensors) {
      t.tensor.event_handle = kEvent;
      t.tensor.event_sync_required = true;
    }
  }
  return SglangNamedTensorsPickle(tensors);
}

// Shapes and offsets at the edges: 0-d, offsets and sizes past int32, rank 5, an empty tensor.
absl::StatusOr<std::string> SglangNullEdges() {
  const std::vector<NamedCudaTensor> tensors = {
      {"scalar", Tensor("float32", {}, 5, kHandleA, 0)},
      {"big", Tensor("uint8", {16}, uint64_t{1} << 31, kHandleA, 0, uint64_t{8} << 30)},
      {"rank5", Tensor("float16", {2, 1, 3, 1, 2}, 0, kHandleA, 0)},
      {"empty", Tensor("int64", {0, 3}, 0, kHandleA, 0)}};
  return SglangNamedTensorsPickle(tensors);
}

absl::StatusOr<std::string> SglangFlattened() {
  const std::vector<FlattenedTensorMetadata> metadata = {{"w", {4, 8}, "bfloat16", 0, 64, 64},
                                                         {"b", {3}, "float32", 64, 76, 12}};
  return SglangFlattenedBucketPickle(Tensor("uint8", {4096}, 8192, kHandleA, std::string(kUuid0)),
                                     metadata);
}

std::vector<std::vector<TensorOnGpu>> VllmNames() {
  return {{{kUuid0, Tensor("bfloat16", {4, 8}, 0, kHandleA, 0)},
           {kUuid1, Tensor("bfloat16", {4, 8}, 0, kHandleB, 1)}},
          {{kUuid0, Tensor("bfloat16", {8}, 32, kHandleA, 0)},
           {kUuid1, Tensor("bfloat16", {8}, 32, kHandleB, 1)}}};
}

absl::StatusOr<std::string> VllmPacked() {
  const std::vector<TensorOnGpu> chunk = {{kUuid0, Tensor("uint8", {4096}, 0, kHandleA, 0)},
                                          {kUuid1, Tensor("uint8", {4096}, 0, kHandleB, 1)}};
  return VllmPackedIpcHandlesPickle(chunk);
}

absl::StatusOr<std::string> LmdeployNull() {
  const std::vector<NamedCudaTensor> tensors = {{"w", Tensor("bfloat16", {4, 8}, 0, kHandleA, 0)},
                                                {"b", Tensor("bfloat16", {8}, 32, kHandleA, 0)}};
  return LmdeployNamedTensorsPickle(tensors);
}

absl::StatusOr<std::string> LmdeployFlattened(bool with_tensor) {
  LmdeployFlattenedBucket bucket;
  bucket.metadata = {{"w", {4, 8}, "bfloat16", 0, 32, 32}, {"b", {8}, "bfloat16", 32, 40, 8}};
  if (with_tensor) bucket.flattened_tensor = Tensor("bfloat16", {40}, 512, kHandleA, 0);
  bucket.event_ipc_handle = kEvent;
  return LmdeployFlattenedBucketPickle(bucket);
}

absl::StatusOr<std::string> CheckpointBucket() {
  const std::vector<CheckpointEngineTensor> tensors = {{"w", {4, 8}, "bfloat16", 0},
                                                       {"s", {}, "float32", 64}};
  return CheckpointEngineBucketFrame(tensors, kStorage);
}

absl::StatusOr<std::string> Section63() {
  PickleWriter w;
  CudaIpcTensor t = Tensor("float32", {1024}, 0, kHandleA, 0, 4096);
  absl::Status s = WriteRebuildPair(t, &w);
  if (!s.ok()) return s;
  return std::move(w).Finish();
}

// What the exact-name unpickler must refuse, written with the low-level writer: the
// copyreg._reconstructor route Python's pickler takes for plain objects below protocol 2, and
// the metadata class under the model_runner re-export that older clients used.
absl::StatusOr<std::string> Reconstructor() {
  PickleWriter w;
  absl::Status s = w.Global("copyreg", "_reconstructor");
  if (s.ok()) s = w.Global("sglang.srt.weight_sync.tensor_bucket", "FlattenedTensorMetadata");
  if (s.ok()) s = w.Global("builtins", "object");
  if (!s.ok()) return s;
  w.None();
  w.Tuple3();
  w.Reduce();
  return std::move(w).Finish();
}

absl::StatusOr<std::string> ModelRunnerMetadata() {
  PickleWriter w;
  absl::Status s = w.Global("sglang.srt.model_executor.model_runner", "FlattenedTensorMetadata");
  if (!s.ok()) return s;
  w.EmptyTuple();
  w.NewObj();
  return std::move(w).Finish();
}

}  // namespace
}  // namespace wsync

int main(int argc, char** argv) {
  using namespace wsync;
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_torch_pickles OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;
  ok &= Write(dir, "sglang_null.rank0.pkl", SglangNullRank(0));
  ok &= Write(dir, "sglang_null.rank1.pkl", SglangNullRank(1));
  ok &= Write(dir, "sglang_null_edges.pkl", SglangNullEdges());
  ok &= Write(dir, "sglang_flattened.pkl", SglangFlattened());
  ok &=
      Write(dir, "vllm_func_args.pkl", VllmIpcHandlesPickle(VllmNames(), VllmEntryForm::kFuncArgs));
  ok &= Write(dir, "vllm_args.pkl", VllmIpcHandlesPickle(VllmNames(), VllmEntryForm::kArgsOnly));
  ok &= Write(dir, "vllm_packed.pkl", VllmPacked());
  ok &= Write(dir, "lmdeploy_null.pkl", LmdeployNull());
  ok &= Write(dir, "lmdeploy_flattened.pkl", LmdeployFlattened(true));
  ok &= Write(dir, "lmdeploy_flattened_cached.pkl", LmdeployFlattened(false));
  ok &= Write(dir, "ckpt_buffer.pkl",
              CheckpointEngineBufferFrame(
                  Tensor("uint8", {static_cast<int64_t>(kStorage)}, 0, kHandleA, 3)));
  ok &= Write(dir, "ckpt_bucket.pkl", CheckpointBucket());
  ok &= Write(dir, "ckpt_none.pkl", CheckpointEngineNoneFrame());
  ok &= Write(dir, "section63.pkl", Section63());
  ok &= Write(dir, "forbidden_reconstructor.pkl", Reconstructor());
  ok &= Write(dir, "forbidden_model_runner.pkl", ModelRunnerMetadata());
  return ok ? 0 : 1;
}
