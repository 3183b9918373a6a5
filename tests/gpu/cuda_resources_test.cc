// Runs only where a CUDA device exists (the GPU machine); elsewhere every test skips.

#include "common/cuda/cuda_resources.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/cuda/cuda_platform.h"
#include "common/cuda/cuda_resident.h"
#include "common/cuda/cuda_slot.h"
#include "common/cuda/cuda_source.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/kernels.h"
#include "gtest/gtest.h"
#include "tests/gpu/skip_without_gpu.h"

namespace wsync::cuda {
namespace {

TEST(CudaResources, BufferIsExportedOnceAndHoldsWhatIsCopiedIn) {
  SKIP_WITHOUT_GPU();
  auto buffer = DeviceBuffer::Create(0, 1 << 20);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*buffer)->ipc_handle().size(), sizeof(cudaIpcMemHandle_t));
  std::vector<char> in(1 << 20, 7), out(1 << 20, 0);
  ASSERT_EQ(cudaMemcpy((*buffer)->data(), in.data(), in.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out.data(), (*buffer)->data(), out.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size()), 0);
}

TEST(CudaResources, InterprocessEventHasAHandle) {
  SKIP_WITHOUT_GPU();
  auto event = IpcEvent::Create(0);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ((*event)->handle().size(), sizeof(cudaIpcEventHandle_t));
  auto stream = Stream::Create(0);
  ASSERT_TRUE(stream.ok());
  ASSERT_EQ(cudaEventRecord((*event)->get(), (*stream)->get()), cudaSuccess);
  EXPECT_TRUE((*stream)->Synchronize().ok());
}

std::vector<uint8_t> Pattern(uint64_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(((i + seed) * 2654435761u) >> 7);
  return v;
}

TEST(CudaKernels, DeviceCrc32EqualsTheHostCrc32ForEveryChunkSize) {
  SKIP_WITHOUT_GPU();
  auto scratch = KernelScratch::Create(0);
  ASSERT_TRUE(scratch.ok()) << scratch.status();
  // Sizes around the chunk and block edges, a partial last block with a tail, and a start that is
  // not 16-byte aligned.
  for (uint64_t n : {0ull, 1ull, 511ull, 1024ull, 65537ull, 256ull << 10, (1ull << 20) + 4096,
                     (33ull << 20) + 7}) {
    for (uint64_t shift : {0ull, 1ull}) {
      std::vector<uint8_t> host = Pattern(n, 1);
      auto buffer = DeviceBuffer::Create(0, n + shift + 1);
      ASSERT_TRUE(buffer.ok());
      char* start = static_cast<char*>((*buffer)->data()) + shift;
      ASSERT_EQ(cudaMemcpy(start, host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
      for (uint32_t chunk : kCrcChunkSizes) {
        auto crc = DeviceCrc32(start, n, nullptr, scratch->get(), chunk);
        ASSERT_TRUE(crc.ok()) << crc.status();
        EXPECT_EQ(*crc, Crc32(host.data(), n))
            << n << " bytes at +" << shift << ", chunk " << chunk;
      }
    }
  }
  EXPECT_EQ(DeviceCrc32(nullptr, 0, nullptr, scratch->get(), 3000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A bucket as the client builds one: pieces back to back, some tiny, some spanning many blocks,
// sources at every alignment, given out of order.
struct Bucket {
  std::vector<uint8_t> source;
  std::vector<CopyItem> items;  // src filled in once the source is on the device
  std::vector<uint64_t> source_offsets;
  uint64_t span = 0;
};

Bucket MakeBucket() {
  Bucket b;
  const uint64_t sizes[] = {14, 1, 3 << 20, 7, 1024, (5 << 20) + 3, 2, 255 << 10, 16, 9999};
  uint64_t src = 0;
  for (uint64_t n : sizes) {
    src += (src % 3) + 1;  // shifts each source to another alignment
    b.source_offsets.push_back(src);
    b.items.push_back(CopyItem{nullptr, b.span, n});
    b.span += n;
    src += n;
  }
  b.source = Pattern(src + 64, 7);
  return b;
}

TEST(CudaKernels, CopyAndCrc32PlacesEveryPieceAndChecksumsTheWholeSpan) {
  SKIP_WITHOUT_GPU();
  Bucket b = MakeBucket();
  auto src = DeviceBuffer::Create(0, b.source.size());
  auto dst = DeviceBuffer::Create(0, b.span + 4096);
  auto scratch = KernelScratch::Create(0);
  ASSERT_TRUE(src.ok() && dst.ok() && scratch.ok());
  ASSERT_EQ(cudaMemcpy((*src)->data(), b.source.data(), b.source.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  std::vector<uint8_t> expected;
  for (size_t i = 0; i < b.items.size(); ++i) {
    b.items[i].src = static_cast<char*>((*src)->data()) + b.source_offsets[i];
    expected.insert(expected.end(), b.source.begin() + b.source_offsets[i],
                    b.source.begin() + b.source_offsets[i] + b.items[i].bytes);
  }
  std::reverse(b.items.begin(), b.items.end());
  for (int round = 0; round < 2; ++round) {  // the second reuses the scratch
    ASSERT_EQ(cudaMemset((*dst)->data(), 0xEE, b.span + 4096), cudaSuccess);
    auto crc = CopyAndCrc32(b.items, (*dst)->data(), b.span, nullptr, scratch->get());
    ASSERT_TRUE(crc.ok()) << crc.status();
    EXPECT_EQ(*crc, Crc32(expected.data(), expected.size()));
    std::vector<uint8_t> out(b.span + 4096);
    ASSERT_EQ(cudaMemcpy(out.data(), (*dst)->data(), out.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(std::memcmp(out.data(), expected.data(), b.span), 0);
    EXPECT_EQ(out[b.span], 0xEE) << "a byte past the span was written";
  }
}

TEST(CudaKernels, SampledCrc32OnTheDeviceEqualsTheHostsForEverySpanShape) {
  SKIP_WITHOUT_GPU();
  constexpr uint64_t kBytes = (5u << 20) + 4321;
  std::vector<uint8_t> host(kBytes);
  for (uint64_t i = 0; i < kBytes; ++i) host[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  auto data = DeviceBuffer::Create(0, kBytes);
  auto scratch = KernelScratch::Create(0);
  ASSERT_TRUE(data.ok() && scratch.ok());
  ASSERT_EQ(cudaMemcpy((*data)->data(), host.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  // The sample buffer is made for the first span's capacity, and made again for a larger span.
  std::unique_ptr<DeviceBuffer> sample;
  for (uint64_t span : {uint64_t{100}, uint64_t{4096}, uint64_t{6000}, uint64_t{1} << 20,
                        (uint64_t{1} << 20) + 10, uint64_t{3} << 20, kBytes}) {
    auto crc = SampledDeviceCrc32(0, (*data)->data(), span, /*capacity=*/4096, &sample, nullptr,
                                  scratch->get());
    ASSERT_TRUE(crc.ok()) << crc.status();
    EXPECT_EQ(*crc, SampledCrc32(host.data(), span)) << span << " bytes";
  }
}

TEST(CudaKernels, BatchedCopyMovesEveryRangeAndRefusesOverlaps) {
  SKIP_WITHOUT_GPU();
  Bucket b = MakeBucket();
  auto src = DeviceBuffer::Create(0, b.source.size());
  auto dst = DeviceBuffer::Create(0, b.span);
  auto scratch = KernelScratch::Create(0);
  ASSERT_TRUE(src.ok() && dst.ok() && scratch.ok());
  ASSERT_EQ(cudaMemcpy((*src)->data(), b.source.data(), b.source.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  for (size_t i = 0; i < b.items.size(); ++i) {
    b.items[i].src = static_cast<char*>((*src)->data()) + b.source_offsets[i];
  }
  ASSERT_TRUE(BatchedCopy(b.items, (*dst)->data(), nullptr, scratch->get()).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> out(b.span);
  ASSERT_EQ(cudaMemcpy(out.data(), (*dst)->data(), b.span, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < b.items.size(); ++i) {
    ASSERT_EQ(std::memcmp(out.data() + b.items[i].offset, b.source.data() + b.source_offsets[i],
                          b.items[i].bytes),
              0)
        << "piece " << i;
  }
  std::vector<CopyItem> overlapping = {b.items[2], b.items[2]};
  overlapping[1].offset += 1;
  EXPECT_EQ(BatchedCopy(overlapping, (*dst)->data(), nullptr, scratch->get()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaPull, ExporterFindsTheAllocationAndRefusesWhatItCannotExport) {
  SKIP_WITHOUT_GPU();
  auto buffer = DeviceBuffer::Create(0, 1 << 20);
  ASSERT_TRUE(buffer.ok());
  auto* base = static_cast<char*>((*buffer)->data());
  CudaSourceExporter exporter(0);
  exporter.BeginUpdate();
  auto first = exporter.Export(base + 100, 64);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->offset, 100u);
  EXPECT_GE(first->allocation_bytes, 1u << 20);
  EXPECT_EQ(first->handle.size(), sizeof(cudaIpcMemHandle_t));
  auto second = exporter.Export(base + 4096, 4096);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->allocation_id, first->allocation_id);
  exporter.BeginUpdate();  // re-checked: the same allocation keeps its id
  auto again = exporter.Export(base, 16);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->allocation_id, first->allocation_id);
  EXPECT_EQ(again->handle, first->handle);
  EXPECT_EQ(exporter.Export(base + (1 << 20) - 8, 8 << 20).status().code(),
            absl::StatusCode::kNotFound);
  std::vector<char> host(64);
  EXPECT_EQ(exporter.Export(host.data(), host.size()).status().code(), absl::StatusCode::kNotFound);
}

TEST(CudaPull, SlotFillsItselfFromDevicePieces) {
  SKIP_WITHOUT_GPU();
  Bucket b = MakeBucket();
  auto src = DeviceBuffer::Create(0, b.source.size());
  auto slot = CudaSlot::Create(0, b.span + 4096);
  ASSERT_TRUE(src.ok() && slot.ok());
  ASSERT_EQ(cudaMemcpy((*src)->data(), b.source.data(), b.source.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  std::vector<SourcePiece> pieces;
  std::vector<uint8_t> expected;
  for (size_t i = 0; i < b.items.size(); ++i) {
    pieces.push_back(SourcePiece{static_cast<char*>((*src)->data()) + b.source_offsets[i],
                                 b.items[i].offset, b.items[i].bytes});
    expected.insert(expected.end(), b.source.begin() + b.source_offsets[i],
                    b.source.begin() + b.source_offsets[i] + b.items[i].bytes);
  }
  absl::Status filled = (*slot)->FillFrom(pieces, b.span);
  ASSERT_TRUE(filled.ok()) << filled;
  std::vector<uint8_t> out(b.span);
  ASSERT_EQ(cudaMemcpy(out.data(), (*slot)->data(), b.span, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(out.data(), expected.data(), b.span), 0);
  pieces.back().bytes += 1;
  EXPECT_EQ((*slot)->FillFrom(pieces, b.span).code(), absl::StatusCode::kOutOfRange);
}

TEST(CudaArena, RegularSlotsAreAlignedRegionsOfOneExportedAllocationEachWithItsEvent) {
  SKIP_WITHOUT_GPU();
  constexpr uint64_t kBytes = (1 << 20) + 1;  // not a multiple of anything
  auto slots = CudaSlot::CreateRegions(0, 3, kBytes);
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_EQ(slots->size(), 3u);
  const uint64_t stride = SlotStride(kBytes);
  EXPECT_EQ(stride, kSlotAlignment);
  auto* base = static_cast<char*>((*slots)[0]->data());
  for (uint32_t i = 0; i < 3; ++i) {
    CudaSlot& slot = *(*slots)[i];
    EXPECT_EQ(slot.bytes(), kBytes);
    EXPECT_EQ(slot.allocation_offset(), i * stride);
    EXPECT_EQ(slot.allocation_bytes(), 3 * stride);
    EXPECT_EQ(slot.memory_handle(), (*slots)[0]->memory_handle()) << "one IPC export";
    EXPECT_EQ(static_cast<char*>(slot.data()), base + i * stride);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(slot.data()) % 256, 0u);
    if (i > 0) {
      EXPECT_NE(slot.event_handle(), (*slots)[0]->event_handle()) << "an event each";
    }
  }
  // Each region holds its own bytes, checksummed from its own start.
  std::vector<std::vector<uint8_t>> data;
  for (uint32_t i = 0; i < 3; ++i) {
    data.push_back(Pattern(kBytes, i + 1));
    ASSERT_EQ(cudaMemcpy((*slots)[i]->data(), data[i].data(), kBytes, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  for (uint32_t i = 0; i < 3; ++i) {
    auto crc = (*slots)[i]->Checksum(kBytes);
    ASSERT_TRUE(crc.ok()) << crc.status();
    EXPECT_EQ(*crc, Crc32(data[i].data(), kBytes)) << "slot " << i;
  }
  // The allocation lives as long as any slot of it.
  std::unique_ptr<CudaSlot> last = std::move((*slots)[2]);
  slots->clear();
  auto crc = last->Checksum(kBytes);
  ASSERT_TRUE(crc.ok()) << crc.status();
  EXPECT_EQ(*crc, Crc32(data[2].data(), kBytes));
}

TEST(CudaArena, TheOversizeSlotIsAnAllocationOfItsOwn) {
  SKIP_WITHOUT_GPU();
  auto slots = CudaSlot::CreateRegions(0, 2, 4096);
  auto oversize = CudaSlot::Create(0, 3 << 20);
  ASSERT_TRUE(slots.ok() && oversize.ok());
  EXPECT_NE((*oversize)->memory_handle(), (*slots)[0]->memory_handle());
  EXPECT_EQ((*oversize)->allocation_offset(), 0u);
  EXPECT_EQ((*oversize)->allocation_bytes(), uint64_t{3} << 20);
}

void CUDART_CB SleepOnHost(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
}

TEST(CudaArena, PollingAnEventNeverWaitsPastItsTimeout) {
  SKIP_WITHOUT_GPU();
  auto event = IpcEvent::Create(0);
  auto stream = Stream::Create(0);
  ASSERT_TRUE(event.ok() && stream.ok());
  EXPECT_TRUE((*event)->Poll(absl::Milliseconds(10), "never recorded").ok());
  // A record held back by host work on its stream stands for an engine's load still running.
  static int kHold = 400;
  ASSERT_EQ(cudaLaunchHostFunc((*stream)->get(), SleepOnHost, &kHold), cudaSuccess);
  ASSERT_EQ(cudaEventRecord((*event)->get(), (*stream)->get()), cudaSuccess);
  absl::Status early = (*event)->Poll(absl::Milliseconds(20), "slot 0");
  EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded) << early;
  EXPECT_NE(early.message().find("slot 0"), absl::string_view::npos);
  EXPECT_TRUE((*event)->Poll(absl::Seconds(10), "slot 0").ok());
}

// Groups whose engines run different NCCL builds each get their own library in one wsyncd: both
// load side by side and each starts a communicator of its own (rank 0's init runs without
// blocking; no peer joins on one GPU, since NCCL refuses two ranks of a communicator on one
// device, so the communicators are aborted unjoined). WSYNC_SECOND_NCCL names the second
// library (run_gpu_tests.sh: torch's bundled copy); the first is the loader's libnccl.so.2.
TEST(NcclPerGroup, TwoLibrariesLoadSideBySideAndEachStartsACommunicator) {
  SKIP_WITHOUT_GPU();
  const char* second = std::getenv("WSYNC_SECOND_NCCL");
  if (second == nullptr || *second == '\0') {
    GTEST_SKIP() << "WSYNC_SECOND_NCCL names no second NCCL library";
  }
  std::string description;
  auto platform = CreateCudaPlatform({"libnccl.so.2"}, &description);
  ASSERT_TRUE(platform.ok()) << platform.status();
  auto first_comm = (*platform)->CreateRootCommunicator(0, 2, "");
  ASSERT_TRUE(first_comm.ok()) << first_comm.status();
  auto second_comm = (*platform)->CreateRootCommunicator(0, 2, second);
  ASSERT_TRUE(second_comm.ok()) << second_comm.status();
  EXPECT_NE((*first_comm)->Describe().find("(libnccl.so.2)"), std::string::npos)
      << (*first_comm)->Describe();
  EXPECT_NE((*second_comm)->Describe().find(absl::StrCat("(", second, ")")), std::string::npos)
      << (*second_comm)->Describe();
  EXPECT_EQ((*first_comm)->unique_id().size(), 128u);
  EXPECT_EQ((*second_comm)->unique_id().size(), 128u);
  EXPECT_NE((*first_comm)->unique_id(), (*second_comm)->unique_id());
  std::printf("first: %s\nsecond: %s\n", (*first_comm)->Describe().c_str(),
              (*second_comm)->Describe().c_str());
  (*first_comm)->Abort("test done");
  (*second_comm)->Abort("test done");
  auto missing = (*platform)->CreateRootCommunicator(0, 2, "/nonexistent/libnccl.so.2");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
}

// One wsyncd's NCCL communicator joined by another's as a peer (the node relay): rank 0 on GPU 0
// broadcasts pieces of its slot, rank 1 on GPU 1 receives them into a slot of its own at the same
// offsets, dtypes as the pieces say. Needs two GPUs: NCCL refuses two ranks on one device.
TEST(NcclPeer, PiecesBroadcastFromOneSlotLandInAPeersSlotOnAnotherGpu) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  std::string description;
  auto platform = CreateCudaPlatform({"libnccl.so.2"}, &description);
  ASSERT_TRUE(platform.ok()) << platform.status();
  constexpr uint64_t kBytes = 64 << 20;
  auto sent = (*platform)->AllocateSlot(0, kBytes);
  auto got = (*platform)->AllocateSlot(1, kBytes);
  ASSERT_TRUE(sent.ok() && got.ok());
  std::vector<uint8_t> pattern = Pattern(kBytes, 11);
  ASSERT_EQ(cudaMemcpy((*sent)->data(), pattern.data(), kBytes, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMemset((*got)->data(), 0, kBytes), cudaSuccess);
  // The tests after this one run on device 0: a stream of device 1 is not ordered with its copies.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const std::vector<BroadcastPiece> pieces = {{1 << 20, (16 << 20) / 2, DType::kBfloat16},
                                              {0, 1024, DType::kFloat32},
                                              {40 << 20, 3, DType::kUint8}};
  auto root = (*platform)->CreateRootCommunicator(0, 2, "");
  ASSERT_TRUE(root.ok()) << root.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  absl::Status received;
  std::thread peer_thread([&] {
    auto peer = (*platform)->JoinCommunicator(1, (*root)->unique_id(), 1, 2, "", deadline);
    if (!peer.ok()) {
      received = peer.status();
      return;
    }
    received = (*peer)->ReceiveInto(**got, pieces, deadline);
    std::printf("peer: %s\n", (*peer)->Describe().c_str());
  });
  auto ticket = (*root)->StartBroadcast(**sent, pieces, deadline);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  EXPECT_TRUE((*root)->WaitBroadcast(*ticket, deadline).ok());
  peer_thread.join();
  ASSERT_TRUE(received.ok()) << received;
  std::vector<uint8_t> out(kBytes);
  ASSERT_EQ(cudaMemcpy(out.data(), (*got)->data(), kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (const BroadcastPiece& p : pieces) {
    EXPECT_EQ(std::memcmp(out.data() + p.offset, pattern.data() + p.offset, p.bytes()), 0)
        << "piece at " << p.offset;
  }
  EXPECT_EQ(out[(40 << 20) + 3], 0) << "nothing beyond the pieces was written";
}

// The node relay's resident copy: a slot's bytes kept on the GPU or in pinned host memory and
// put back into another slot, byte for byte, with the copy rate of each medium printed.
TEST(CudaResident, ABucketKeptInEitherMediumComesBackByteForByte) {
  SKIP_WITHOUT_GPU();
  constexpr uint64_t kBytes = uint64_t{256} << 20;
  // The memsets below go to the current device's stream: it must be the slots' device, or they
  // race the resident copies (which run on device 0's).
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  auto from = CudaSlot::Create(0, kBytes);
  auto to = CudaSlot::Create(0, kBytes);
  ASSERT_TRUE(from.ok() && to.ok());
  const std::vector<uint8_t> pattern = Pattern(kBytes, 17);
  ASSERT_EQ(cudaMemcpy((*from)->data(), pattern.data(), kBytes, cudaMemcpyHostToDevice),
            cudaSuccess);
  for (ResidentMedium medium : {ResidentMedium::kGpu, ResidentMedium::kHost}) {
    auto resident = CudaResident::Create(0, medium, kBytes);
    ASSERT_TRUE(resident.ok()) << resident.status();
    ASSERT_EQ(cudaMemset((*to)->data(), 0, kBytes), cudaSuccess);
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE((*resident)->CopyFromSlot(**from).ok());
    const auto kept = std::chrono::steady_clock::now();
    ASSERT_TRUE((*resident)->CopyToSlot(**to).ok());
    const auto back = std::chrono::steady_clock::now();
    std::vector<uint8_t> out(kBytes);
    ASSERT_EQ(cudaMemcpy(out.data(), (*to)->data(), kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(out, pattern) << ResidentMediumName(medium);
    const auto gibs = [&](auto d) {
      return kBytes / std::chrono::duration<double>(d).count() / (1 << 30);
    };
    std::printf("resident %s: keep %.1f GiB/s, put back %.1f GiB/s (256 MiB)\n",
                std::string(ResidentMediumName(medium)).c_str(), gibs(kept - start),
                gibs(back - kept));
  }
  auto small = CudaSlot::Create(0, 4096);
  auto resident = CudaResident::Create(0, ResidentMedium::kGpu, kBytes);
  ASSERT_TRUE(small.ok() && resident.ok());
  EXPECT_EQ((*resident)->CopyToSlot(**small).code(), absl::StatusCode::kOutOfRange);
}

TEST(CudaStatus, ErrorsCarryTheCallAndCudasText) {
  absl::Status s = WSYNC_CUDA_STATUS(cudaErrorInvalidValue);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("cudaErrorInvalidValue"), absl::string_view::npos);
  EXPECT_NE(s.message().find("cuda_resources_test.cc"), absl::string_view::npos);
}

}  // namespace
}  // namespace wsync::cuda
