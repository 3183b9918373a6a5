// The protocol-3 pickle writer and the torch CUDA-IPC pickles built on it
// (common/torch_ipc/pickle_writer.h, common/torch_ipc/torch_ipc_pickle.h, and each engine's
// daemon/engines/<kind>/<kind>_ipc_pickle.h). Expected bytes are written out here from
// docs/engines/torch-ipc.md and CPython's pickler, not taken from the writer; every whole payload
// also goes through the structural checker of tests/pickle. The Python side (loading them with
// an exact-name unpickler) is tests/pickle/check_torch_pickles.py.

#include <sys/mman.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/torch_ipc/pickle_writer.h"
#include "common/torch_ipc/torch_ipc_pickle.h"
#include "daemon/engines/lmdeploy/lmdeploy_ipc_pickle.h"
#include "daemon/engines/sglang/sglang_ipc_pickle.h"
#include "daemon/engines/vllm/vllm_ipc_pickle.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/pickle/pickle_checker.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Hex(absl::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) absl::StrAppend(&out, absl::Hex(c, absl::kZeroPad2), " ");
  return out;
}

// The opcodes a writer added after PROTO 3.
std::string Body(const PickleWriter& w) { return w.bytes().substr(2); }

std::string Handle(uint8_t first) {
  std::string h(kCudaIpcHandleBytes, '\0');
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<char>(first + i);
  return h;
}

std::string Global(absl::string_view module, absl::string_view name) {
  return absl::StrCat("c", module, "\n", name, "\n");
}

CudaIpcTensor Float32Of1024() {
  CudaIpcTensor t;
  t.dtype = "float32";
  t.shape = {1024};
  t.storage_size_bytes = 4096;
  t.ipc_handle = Handle(0x10);
  return t;
}

// ---- PickleWriter -------------------------------------------------------------------------------

TEST(PickleWriter, StartsWithProto3AndEndsWithStop) {
  PickleWriter w;
  EXPECT_EQ(w.bytes(), std::string("\x80\x03", 2));
  w.None();
  EXPECT_EQ(std::move(w).Finish(), std::string("\x80\x03N.", 4));
}

struct IntCase {
  int64_t value;
  std::string bytes;
};

TEST(PickleWriter, IntsTakeCPythonsOpcodes) {
  // From pickle.dumps(v, protocol=3) in CPython 3.11.
  const std::vector<IntCase> cases = {
      {0, std::string("K\x00", 2)},
      {255, "K\xff"},
      {256, std::string("M\x00\x01", 3)},
      {65535, "M\xff\xff"},
      {65536, std::string("J\x00\x00\x01\x00", 5)},
      {(int64_t{1} << 31) - 1, "J\xff\xff\xff\x7f"},
      {-1, "J\xff\xff\xff\xff"},
      {-(int64_t{1} << 31), std::string("J\x00\x00\x00\x80", 5)},
      // docs/engines/torch-ipc.md: 2^31 and 8 GiB.
      {int64_t{1} << 31, std::string("\x8a\x05\x00\x00\x00\x80\x00", 7)},
      {int64_t{8} << 30, std::string("\x8a\x05\x00\x00\x00\x00\x02", 7)},
      {-(int64_t{1} << 31) - 1, "\x8a\x05\xff\xff\xff\x7f\xff"},
      {std::numeric_limits<int64_t>::min(),
       std::string("\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80", 10)},
      {std::numeric_limits<int64_t>::max(), "\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f"},
  };
  for (const IntCase& c : cases) {
    PickleWriter w;
    w.Int(c.value);
    EXPECT_EQ(Hex(Body(w)), Hex(c.bytes)) << c.value;
    if (c.value >= 0) {
      PickleWriter u;
      u.Uint(static_cast<uint64_t>(c.value));
      EXPECT_EQ(Hex(Body(u)), Hex(c.bytes)) << c.value;
    }
  }
}

TEST(PickleWriter, UnsignedPastInt64TakesANinthByteForTheSign) {
  PickleWriter w;
  w.Uint(std::numeric_limits<uint64_t>::max());
  w.Uint(uint64_t{1} << 63);
  EXPECT_EQ(Hex(Body(w)), Hex(std::string("\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00"
                                          "\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00",
                                          22)));
}

TEST(PickleWriter, EncodeLongIsMinimalTwosComplement) {
  // pickle.encode_long in CPython 3.11.
  EXPECT_EQ(EncodeLong(int64_t{0}), "");
  EXPECT_EQ(Hex(EncodeLong(int64_t{-1})), "ff ");
  EXPECT_EQ(Hex(EncodeLong(int64_t{127})), "7f ");
  EXPECT_EQ(Hex(EncodeLong(int64_t{128})), "80 00 ");
  EXPECT_EQ(Hex(EncodeLong(int64_t{-128})), "80 ");
  EXPECT_EQ(Hex(EncodeLong(int64_t{-129})), "7f ff ");
  EXPECT_EQ(Hex(EncodeLong(int64_t{255})), "ff 00 ");
  EXPECT_EQ(Hex(EncodeLong(uint64_t{255})), "ff 00 ");
  EXPECT_EQ(EncodeLong(uint64_t{0}), "");
}

TEST(PickleWriter, BytesSwitchToBinbytesAt256) {
  PickleWriter w;
  ASSERT_TRUE(w.Bytes(std::string(255, 'a')).ok());
  EXPECT_EQ(Hex(Body(w).substr(0, 2)), "43 ff ");
  PickleWriter v;
  ASSERT_TRUE(v.Bytes(std::string(256, 'a')).ok());
  EXPECT_EQ(Hex(Body(v).substr(0, 5)), "42 00 01 00 00 ");
  EXPECT_EQ(Body(v).size(), 5u + 256u);
}

TEST(PickleWriter, BytesAndStrPastU32AreRefused) {
  // A reserved, never touched range of 2^32 + 1 bytes: the writer must refuse it by its size
  // before reading any of it.
  const size_t size = (size_t{1} << 32) + 1;
  void* range = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(range, MAP_FAILED);
  const absl::string_view huge(static_cast<const char*>(range), size);
  PickleWriter w;
  const absl::Status bytes = w.Bytes(huge);
  EXPECT_EQ(bytes.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bytes.message(), HasSubstr("u32"));
  const absl::Status text = w.Unicode(huge);
  EXPECT_EQ(text.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(w.bytes().size(), 2u);
  munmap(range, size);
}

TEST(PickleWriter, UnicodeIsBinunicodeOfUtf8Only) {
  PickleWriter w;
  ASSERT_TRUE(w.Unicode("\xc3\xa9").ok());  // é
  EXPECT_EQ(Hex(Body(w)), "58 02 00 00 00 c3 a9 ");
  for (const char* bad : {"\xff", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\xc3"}) {
    const absl::Status s = w.Unicode(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << Hex(bad);
  }
  EXPECT_EQ(Hex(Body(w)), "58 02 00 00 00 c3 a9 ");
}

TEST(PickleWriter, GlobalRefusesWhatIsNotAPythonName) {
  PickleWriter w;
  ASSERT_TRUE(w.Global("torch.storage", "TypedStorage").ok());
  EXPECT_EQ(Body(w), "ctorch.storage\nTypedStorage\n");
  const std::pair<const char*, const char*> bad[] = {
      {"torch\nos", "system"}, {"torch", "Size\nX"}, {"", "Size"},       {"torch", ""},
      {"torch.", "Size"},      {".torch", "Size"},   {"torch", "a.b"},   {"9torch", "Size"},
      {"torch", "Si ze"},      {"torch\r", "Size"},  {"t\xc3\xa9", "x"},
  };
  for (const auto& [module, name] : bad) {
    const absl::Status s = w.Global(module, name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << module << "." << name;
  }
  EXPECT_EQ(Body(w), "ctorch.storage\nTypedStorage\n");
}

TEST(PickleWriter, IntTuplesTakeTheShortForms) {
  PickleWriter w;
  w.IntTuple({});
  w.IntTuple({1});
  w.IntTuple({1, 2});
  w.IntTuple({1, 2, 3});
  w.IntTuple({1, 2, 3, 4});
  EXPECT_EQ(Hex(Body(w)),
            "29 4b 01 85 4b 01 4b 02 86 4b 01 4b 02 4b 03 87 28 4b 01 4b 02 4b 03 4b 04 74 ");
}

// ---- The tensor (docs/engines/torch-ipc.md) --------------------------------------------------

// A worked layout (float32 [1024], device 0, a 4096-byte storage at offset 0) whose opcode
// sequence real torch 2.11 rebuilt into a tensor (mark T in docs/engines/torch-ipc.md).
// Written here byte by byte from that layout, not from the writer.
std::string Section63Args(absl::string_view handle, absl::string_view device) {
  std::string b;
  b += "(";
  b += Global("torch", "Tensor");
  b += Global("torch", "Size") + std::string("M\x00\x04\x85\x85R", 6);
  b += std::string("K\x01\x85", 3);
  b += std::string("K\x00", 2);
  b += Global("torch.storage", "TypedStorage");
  b += Global("torch", "float32");
  b += std::string(device);
  b += std::string("C\x40", 2) + std::string(handle);
  b += std::string("M\x00\x10", 3);
  b += std::string("K\x00", 2);
  b += "\x89";
  b += std::string("C\x09/wsync_rc", 11);
  b += std::string("K\x00", 2);
  b += std::string("C\x40", 2) + std::string(64, '\0');
  b += "\x89";
  b += "t";
  return b;
}

const std::string kFunc = Global("torch.multiprocessing.reductions", "rebuild_cuda_tensor");

TEST(TorchIpcPickle, FuncArgsPairIsThe294BytesOfSection63) {
  const CudaIpcTensor t = Float32Of1024();
  const std::string expected = std::string("\x80\x03", 2) + kFunc +
                               Section63Args(t.ipc_handle, std::string("K\x00", 2)) + "\x86.";
  ASSERT_EQ(expected.size(), 294u);
  PickleWriter w;
  ASSERT_TRUE(WriteRebuildPair(t, &w).ok());
  const std::string got = std::move(w).Finish();
  EXPECT_EQ(Hex(got), Hex(expected));
  ASSERT_TRUE(CheckTorchIpcPickle(got).ok()) << CheckTorchIpcPickle(got).status();
}

TEST(TorchIpcPickle, FragmentsAreFuncArgsReduceAndArgsAlone) {
  const CudaIpcTensor t = Float32Of1024();
  const std::string args = Section63Args(t.ipc_handle, std::string("K\x00", 2));
  PickleWriter reduced;
  ASSERT_TRUE(WriteReducedTensor(t, &reduced).ok());
  EXPECT_EQ(Hex(Body(reduced)), Hex(kFunc + args + "R"));
  PickleWriter alone;
  ASSERT_TRUE(WriteRebuildArgs(t, &alone).ok());
  EXPECT_EQ(Hex(Body(alone)), Hex(args));
  PickleWriter func;
  ASSERT_TRUE(WriteRebuildFunc(&func).ok());
  EXPECT_EQ(Body(func), kFunc);
}

TEST(TorchIpcPickle, SglangDeviceIsTheGpuUuidAsBinunicode) {
  CudaIpcTensor t = Float32Of1024();
  const std::string uuid = "126c071a-1253-3d49-71ab-17c686b110d5";
  t.device = uuid;
  PickleWriter w;
  ASSERT_TRUE(WriteRebuildArgs(t, &w).ok());
  EXPECT_EQ(Hex(Body(w)),
            Hex(Section63Args(t.ipc_handle, std::string("X\x24\x00\x00\x00", 5) + uuid)));
}

TEST(TorchIpcPickle, EventSyncIsAnExactBoolAfterTheEventHandle) {
  CudaIpcTensor t = Float32Of1024();
  t.event_handle = Handle(0x80);
  t.event_sync_required = true;
  PickleWriter w;
  ASSERT_TRUE(WriteRebuildArgs(t, &w).ok());
  const std::string body = Body(w);
  EXPECT_EQ(Hex(body.substr(body.size() - 68)), Hex("C\x40" + t.event_handle + "\x88t"));
}

TEST(TorchIpcPickle, SizeDtypeAndStrides) {
  PickleWriter w;
  ASSERT_TRUE(WriteTorchSize({}, &w).ok());
  EXPECT_EQ(Body(w), Global("torch", "Size") + ")\x85R");
  PickleWriter d;
  ASSERT_TRUE(WriteTorchDtype(DType::kFloat8E4m3fn, &d).ok());
  EXPECT_EQ(Body(d), Global("torch", "float8_e4m3fn"));
  EXPECT_EQ(*ContiguousStrides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(*ContiguousStrides({2, 0, 3}), (std::vector<int64_t>{3, 3, 1}));  // torch's rule
  EXPECT_TRUE(ContiguousStrides({})->empty());
  EXPECT_FALSE(ContiguousStrides({int64_t{1} << 32, int64_t{1} << 32}).ok());
  EXPECT_FALSE(ContiguousStrides({2, -1}).ok());
}

TEST(TorchIpcPickle, ViewOffsetsAndSizesPastInt32AreLong1) {
  CudaIpcTensor t;
  t.dtype = "uint8";
  t.shape = {16};
  t.element_offset = uint64_t{1} << 31;
  t.storage_size_bytes = uint64_t{8} << 30;
  t.ipc_handle = Handle(0);
  PickleWriter w;
  ASSERT_TRUE(WriteRebuildArgs(t, &w).ok());
  const std::string body = Body(w);
  EXPECT_NE(body.find(std::string("\x85\x8a\x05\x00\x00\x00\x80\x00", 8)), std::string::npos);
  EXPECT_NE(body.find(std::string("\x8a\x05\x00\x00\x00\x00\x02K\x00\x89", 10)), std::string::npos);
}

struct Refusal {
  const char* what;
  CudaIpcTensor tensor;
  const char* message;
};

TEST(TorchIpcPickle, BadTensorsAreRefusedWithTheReason) {
  std::vector<Refusal> cases;
  auto with = [](auto change) {
    CudaIpcTensor t = Float32Of1024();
    change(t);
    return t;
  };
  cases.push_back({"unknown dtype", with([](CudaIpcTensor& t) { t.dtype = "torch.float32"; }),
                   "unknown dtype 'torch.float32'"});
  cases.push_back({"storage not whole elements",
                   with([](CudaIpcTensor& t) { t.storage_size_bytes = 4098; }), "not aligned"});
  cases.push_back({"storage start not aligned",
                   with([](CudaIpcTensor& t) { t.storage_offset_bytes = 2; }), "not aligned"});
  cases.push_back(
      {"view past the storage", with([](CudaIpcTensor& t) { t.element_offset = 1; }), "past"});
  cases.push_back({"offset past the storage",
                   with([](CudaIpcTensor& t) { t.element_offset = uint64_t{1} << 62; }), "past"});
  cases.push_back({"torch's 66-byte handle form", with([](CudaIpcTensor& t) {
                     t.ipc_handle =
                         "\x02"
                         "c" +
                         t.ipc_handle;
                   }),
                   "66 bytes, not 64"});
  cases.push_back({"no event handle", with([](CudaIpcTensor& t) { t.event_handle.clear(); }),
                   "event handle is 0 bytes"});
  cases.push_back({"negative dim", with([](CudaIpcTensor& t) {
                     t.shape = {4, -1};
                   }),
                   "negative dimension"});
  cases.push_back({"too many elements", with([](CudaIpcTensor& t) {
                     t.shape = {int64_t{1} << 40, int64_t{1} << 40};
                   }),
                   "int64"});
  cases.push_back({"negative device", with([](CudaIpcTensor& t) { t.device = -1; }), "negative"});
  cases.push_back(
      {"empty uuid", with([](CudaIpcTensor& t) { t.device = std::string(); }), "empty GPU UUID"});
  cases.push_back({"uuid not UTF-8", with([](CudaIpcTensor& t) { t.device = "\xff"; }), "UTF-8"});
  cases.push_back({"storage past int64",
                   with([](CudaIpcTensor& t) { t.storage_size_bytes = uint64_t{1} << 63; }),
                   "int64"});
  for (const Refusal& c : cases) {
    PickleWriter w;
    const absl::Status s = WriteReducedTensor(c.tensor, &w);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.what;
  }
}

TEST(TorchIpcPickle, EmptyTensorsAndEmptyStorages) {
  CudaIpcTensor t = Float32Of1024();
  t.shape = {0};
  t.storage_size_bytes = 0;
  PickleWriter w;
  EXPECT_TRUE(WriteRebuildArgs(t, &w).ok());
  t.shape = {};  // 0-d: one element, which an empty storage lacks
  PickleWriter v;
  EXPECT_EQ(WriteRebuildArgs(t, &v).code(), absl::StatusCode::kInvalidArgument);
}

// ---- FlattenedTensorMetadata and the wrappers (§6.4, §6.5) --------------------------------------

TEST(TorchIpcPickle, MetadataIsNewobjWithAStateDict) {
  const FlattenedTensorMetadata m{"w", {2, 3}, "bfloat16", 6, 12, 6};
  PickleWriter w;
  ASSERT_TRUE(WriteFlattenedTensorMetadata(m, kLmdeployMetadataModule, &w).ok());
  std::string expected = Global("lmdeploy.utils", "FlattenedTensorMetadata") + ")\x81}(";
  expected += std::string("X\x04\x00\x00\x00name", 9) + std::string("X\x01\x00\x00\x00w", 6);
  expected += std::string("X\x05\x00\x00\x00shape", 10) + Global("torch", "Size") +
              std::string("K\x02K\x03\x86\x85R", 7);
  expected += std::string(
                  "X\x05\x00\x00\x00"
                  "dtype",
                  10) +
              Global("torch", "bfloat16");
  expected += std::string("X\x09\x00\x00\x00start_idx", 14) + "K\x06";
  expected += std::string(
                  "X\x07\x00\x00\x00"
                  "end_idx",
                  12) +
              "K\x0c";
  expected += std::string("X\x05\x00\x00\x00numel", 10) + "K\x06";
  expected += "ub";
  EXPECT_EQ(Hex(Body(w)), Hex(expected));
  EXPECT_EQ(kSglangMetadataModule, "sglang.srt.weight_sync.tensor_bucket");
  PickleWriter bad;
  EXPECT_EQ(
      WriteFlattenedTensorMetadata({"w", {2}, "bfloat16", 6, 12, 2}, kLmdeployMetadataModule, &bad)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

CudaIpcTensor Uint8Buffer(uint64_t bytes) {
  CudaIpcTensor t;
  t.dtype = "uint8";
  t.shape = {static_cast<int64_t>(bytes)};
  t.storage_size_bytes = bytes;
  t.ipc_handle = Handle(0x20);
  return t;
}

CudaIpcTensor Bf16(std::vector<int64_t> shape, uint64_t element_offset) {
  CudaIpcTensor t;
  t.dtype = "bfloat16";
  t.shape = std::move(shape);
  t.element_offset = element_offset;
  t.storage_size_bytes = 1 << 20;
  t.ipc_handle = Handle(0x30);
  return t;
}

// A whole payload: passes the checker, with `top` at STOP and `globals` GLOBALs.
void ExpectSound(const absl::StatusOr<std::string>& pickle, absl::string_view top, size_t globals) {
  ASSERT_TRUE(pickle.ok()) << pickle.status();
  auto checked = CheckTorchIpcPickle(*pickle);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->top_kind, top);
  EXPECT_EQ(checked->globals.size(), globals);
}

TEST(TorchIpcPickle, EveryWrapperWritesASoundPickle) {
  const std::vector<NamedCudaTensor> named = {{"a.weight", Bf16({4, 8}, 0)},
                                              {"b.bias", Bf16({8}, 32)}};
  // A tensor is 5 GLOBALs (rebuild_cuda_tensor, Tensor, Size, TypedStorage, its dtype), its
  // ARGS alone 4.
  ExpectSound(SglangNamedTensorsPickle(named), "list", 10);
  ExpectSound(LmdeployNamedTensorsPickle(named), "list", 10);
  ExpectSound(SglangNamedTensorsPickle({}), "list", 0);

  const std::vector<FlattenedTensorMetadata> bytes_meta = {{"w", {4, 8}, "bfloat16", 0, 64, 64},
                                                           {"b", {3}, "float32", 64, 76, 12}};
  // Each metadata entry: the class, Size and the dtype.
  ExpectSound(SglangFlattenedBucketPickle(Uint8Buffer(4096), bytes_meta), "dict", 5 + 6);
  const std::vector<FlattenedTensorMetadata> element_meta = {{"w", {4, 8}, "bfloat16", 0, 32, 32},
                                                             {"b", {8}, "bfloat16", 32, 40, 8}};
  ExpectSound(SglangFlattenedBucketPickle(Bf16({40}, 0), element_meta), "dict", 5 + 6);

  const std::vector<TensorOnGpu> first = {{"GPU-a", Bf16({4, 8}, 0)}, {"GPU-b", Bf16({4, 8}, 0)}};
  const std::vector<TensorOnGpu> second = {{"GPU-a", Bf16({8}, 32)}};
  const std::vector<std::vector<TensorOnGpu>> names = {first, second};
  ExpectSound(VllmIpcHandlesPickle(names, VllmEntryForm::kFuncArgs), "list", 15);
  ExpectSound(VllmIpcHandlesPickle(names, VllmEntryForm::kArgsOnly), "list", 12);
  const std::vector<TensorOnGpu> chunk = {{"GPU-a", Uint8Buffer(1024)}};
  ExpectSound(VllmPackedIpcHandlesPickle(chunk), "dict", 4);

  LmdeployFlattenedBucket bucket;
  bucket.metadata = element_meta;
  bucket.flattened_tensor = Bf16({40}, 512);
  ExpectSound(LmdeployFlattenedBucketPickle(bucket), "dict", 5 + 6);
  bucket.flattened_tensor.reset();
  ExpectSound(LmdeployFlattenedBucketPickle(bucket), "dict", 6);

  ExpectSound(CheckpointEngineBufferFrame(Uint8Buffer(1 << 20)), "tuple", 5);
  ExpectSound(CheckpointEngineBucketFrame({{"w", {4, 8}, "bfloat16", 0}, {"s", {}, "float32", 64}},
                                          1 << 20),
              "list", 4);
  ExpectSound(CheckpointEngineNoneFrame(), "none", 0);
}

// What the worker raises on: builtins.RuntimeError(text). Golden bytes, the layout of
// pickle.dumps(RuntimeError("wsync aborted the update: x?"), protocol=3) less its memo (PUT)
// opcodes, which change nothing a loader builds: PROTO 3, GLOBAL, BINUNICODE, TUPLE1, REDUCE,
// STOP. The reason is printable ASCII and cut to 512 bytes.
TEST(CheckpointEngineFrames, AbortIsARuntimeErrorWithPrintableText) {
  const std::string text = "wsync aborted the update: x?";
  std::string expected =
      "\x80\x03"
      "cbuiltins\nRuntimeError\n"
      "X";
  expected.push_back(static_cast<char>(text.size()));
  expected.append(3, '\0');
  expected += text + "\x85R.";
  EXPECT_EQ(CheckpointEngineAbortFrame("x\n"), expected);
  const std::string long_reason(2000, 'a');
  const std::string frame = CheckpointEngineAbortFrame(long_reason);
  EXPECT_EQ(frame.size(), expected.size() - 2 + 512);
  EXPECT_EQ(CheckpointEngineAbortFrame("\xc3\xa9").find('\xc3'), std::string::npos);
}

struct PayloadRefusal {
  const char* what;
  absl::StatusOr<std::string> result;
  const char* message;
};

TEST(TorchIpcPickle, WrappersRefuseLayoutsTheEngineWouldMisread) {
  LmdeployFlattenedBucket no_metadata;
  no_metadata.flattened_tensor = Bf16({40}, 0);
  LmdeployFlattenedBucket cast;
  cast.metadata = {{"w", {4}, "float16", 0, 4, 4}};
  cast.flattened_tensor = Bf16({40}, 0);
  LmdeployFlattenedBucket short_event;
  short_event.event_ipc_handle = "x";
  const std::vector<TensorOnGpu> twice = {{"GPU-a", Bf16({8}, 0)}, {"GPU-a", Bf16({8}, 0)}};
  const std::vector<std::vector<TensorOnGpu>> no_gpu(1);
  const std::vector<TensorOnGpu> bf16_chunk = {{"GPU-a", Bf16({8}, 0)}};
  const std::vector<PayloadRefusal> cases = {
      {"uint8 range not on a float32 boundary",
       SglangFlattenedBucketPickle(Uint8Buffer(4096), {{"b", {3}, "float32", 2, 14, 12}}),
       "not aligned"},
      {"uint8 bucket at an odd element",
       SglangFlattenedBucketPickle(
           [] {
             CudaIpcTensor t = Uint8Buffer(4096);
             t.shape = {4095};
             t.element_offset = 1;
             return t;
           }(),
           {{"b", {3}, "float32", 4, 16, 12}}),
       "not aligned"},
      {"bytes that are not the shape",
       SglangFlattenedBucketPickle(Uint8Buffer(4096), {{"b", {3}, "float32", 0, 8, 8}}),
       "is not 8 bytes"},
      {"range past the bucket",
       SglangFlattenedBucketPickle(Bf16({40}, 0), {{"w", {8}, "bfloat16", 36, 44, 8}}),
       "past the flattened tensor"},
      {"old bucket of another dtype",
       SglangFlattenedBucketPickle(Bf16({40}, 0), {{"w", {8}, "float32", 0, 8, 8}}),
       "only a uint8 bucket"},
      {"flattened tensor not 1-D",
       SglangFlattenedBucketPickle(Bf16({4, 10}, 0), {{"w", {8}, "bfloat16", 0, 8, 8}}), "1-D"},
      {"metadata with no name",
       SglangFlattenedBucketPickle(Bf16({40}, 0), {{"", {8}, "bfloat16", 0, 8, 8}}), "empty name"},
      {"LMDeploy cast", LmdeployFlattenedBucketPickle(cast), "cast"},
      {"LMDeploy tensor without metadata", LmdeployFlattenedBucketPickle(no_metadata),
       "before caching"},
      {"LMDeploy event handle", LmdeployFlattenedBucketPickle(short_event), "1 bytes, not 64"},
      {"vLLM GPU twice",
       VllmIpcHandlesPickle(std::vector<std::vector<TensorOnGpu>>{twice}, VllmEntryForm::kArgsOnly),
       "given twice"},
      {"vLLM no GPU", VllmIpcHandlesPickle(no_gpu, VllmEntryForm::kFuncArgs), "names no GPU"},
      {"vLLM packed chunk not uint8", VllmPackedIpcHandlesPickle(bf16_chunk), "uint8"},
      {"tensor with no name", SglangNamedTensorsPickle({{"", Bf16({8}, 0)}}), "empty name"},
      {"bad tensor inside a list", LmdeployNamedTensorsPickle({{"w", Bf16({8}, 1 << 30)}}),
       "tensor 'w': view of 8 elements"},
      {"checkpoint-engine buffer not uint8", CheckpointEngineBufferFrame(Bf16({8}, 0)), "uint8"},
      {"checkpoint-engine offset not aligned",
       CheckpointEngineBucketFrame({{"w", {4}, "float32", 2}}, 64), "not aligned"},
      {"checkpoint-engine tensor past the buffer",
       CheckpointEngineBucketFrame({{"w", {4}, "float32", 56}}, 64), "past the buffer"},
      {"checkpoint-engine unknown dtype",
       CheckpointEngineBucketFrame({{"w", {4}, "complex64", 0}}, 64), "unknown dtype"},
  };
  for (const PayloadRefusal& c : cases) {
    EXPECT_EQ(c.result.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << c.result.status();
    EXPECT_THAT(c.result.status().message(), HasSubstr(c.message)) << c.what;
  }
}

// ---- The checker can fail
// ------------------------------------------------------------------------

TEST(PickleChecker, RefusesForbiddenGlobalsMemoAndBrokenStacks) {
  PickleWriter reconstructor;
  ASSERT_TRUE(reconstructor.Global("copyreg", "_reconstructor").ok());
  reconstructor.EmptyTuple();
  reconstructor.Reduce();
  EXPECT_THAT(CheckTorchIpcPickle(std::move(reconstructor).Finish()).status().message(),
              HasSubstr("GLOBAL copyreg _reconstructor is not allowed"));
  PickleWriter old_module;
  ASSERT_TRUE(
      old_module.Global("sglang.srt.model_executor.model_runner", "FlattenedTensorMetadata").ok());
  EXPECT_FALSE(CheckTorchIpcPickle(std::move(old_module).Finish()).ok());

  const std::pair<std::string, const char*> broken[] = {
      {std::string("\x80\x02N.", 4), "PROTO 3"},
      {std::string("\x80\x03Nq\x00.", 6), "memo opcode"},
      {std::string("\x80\x03(N.", 5), "unclosed MARK"},
      {std::string("\x80\x03NN.", 5), "2 objects"},
      {std::string("\x80\x03N", 3), "without STOP"},
      {std::string("\x80\x03N.N", 5), "after STOP"},
      {std::string("\x80\x03K\x01K\x02R.", 8), "REDUCE of a int"},
      {std::string("\x80\x03\x85.", 4), "TUPLE1 needs 1"},
      {std::string("\x80\x03M\x01\x00.", 6), "BININT2 for an int"},
      {std::string("\x80\x03\x8a\x05\x00\x00\x00\x00\x00.", 10), "not minimal"},
      {std::string("\x80\x03}(K\x01Nu.", 9), "dict key is a int"},
      {std::string("\x80\x03]Ne.", 6), "without a MARK"},
      {std::string("\x80\x03\x95.", 4), "opcode 0x95"},
  };
  for (const auto& [bytes, message] : broken) {
    const auto checked = CheckTorchIpcPickle(bytes);
    ASSERT_FALSE(checked.ok()) << Hex(bytes);
    EXPECT_THAT(checked.status().message(), HasSubstr(message)) << Hex(bytes);
  }
  EXPECT_THAT(CheckTorchIpcPickle(std::string("\x80\x03N.", 4))->top_kind, StartsWith("none"));
}

}  // namespace
}  // namespace wsync
