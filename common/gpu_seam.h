#ifndef WSYNC_COMMON_GPU_SEAM_H_
#define WSYNC_COMMON_GPU_SEAM_H_

// The GPU seam: everything above it (daemon core, adapters, service, client logic) talks to these
// interfaces only. common/cuda implements them with CUDA IPC and NCCL; common/host implements them
// with POSIX shared memory and a TCP collective so the rest is built and tested without a GPU.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/dtype.h"

namespace wsync {

enum class MemoryKind { kHostShm, kCudaIpc };

absl::string_view MemoryKindName(MemoryKind kind);

// Pull mode (docs/PULL_MODE.md): one allocation of the trainer's, holding tensors, mapped into
// wsyncd, which copies buckets out of it itself. On a GPU shared without MPS all of an update's GPU
// work then runs in wsyncd's one CUDA context, where copies overlap broadcasts.
class SourceMemory {
 public:
  virtual ~SourceMemory() = default;
  virtual const void* data() const = 0;
  virtual uint64_t bytes() const = 0;
  // How errors name it (host mode: the shared-memory name).
  virtual std::string Describe() const { return "a trainer allocation"; }
  // What another process maps it by, as the trainer announced it: a cudaIpcMemHandle_t of the
  // allocation's base, or (host mode) the shared-memory name. Colocated engines are handed it to
  // read a bucket in place (zero copy).
  virtual MemoryKind kind() const = 0;
  virtual const std::string& memory_handle() const = 0;
  // DATA_LOSS when the allocation no longer holds the mapped bytes: in host mode the trainer can
  // truncate its segment, and reading past the new end would raise SIGBUS. Checked before a
  // bucket is broadcast straight out of it, since the kernel then reads it, not wsyncd's guarded
  // copy (common/host/fault_guard.h).
  virtual absl::Status CheckIntact() const { return absl::OkStatus(); }
};

// One tensor for SlotMemory::FillFrom: `bytes` from `src` to `offset` bytes into the slot.
struct SourcePiece {
  const void* src = nullptr;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  // The mapping `src` lies in, to name it when reading it fails; may be null.
  const SourceMemory* memory = nullptr;
};

// Where each regular slot of a device starts in the device's one slot allocation: at a multiple
// of this. 256 bytes is what the slots need (cudaMalloc's own alignment: every dtype's size
// divides it, so engines index a slot in elements of any dtype, and the copy kernels, NCCL and
// torch's vectorised loads assume it). 2 MiB, the GPU's large page, also keeps each slot on pages
// of its own; it costs under 2 MiB per slot of hundreds of MiB, and in host mode nothing (shared
// memory is allocated as it is touched).
inline constexpr uint64_t kSlotAlignment = uint64_t{2} << 20;

// The distance between two regular slots of `bytes` in one allocation.
inline uint64_t SlotStride(uint64_t bytes) {
  return (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
}

// A slot: memory the daemon allocates once, exports once and reuses for every bucket. The regular
// slots of a device are regions of one allocation (Platform::AllocateSlots), so a process maps
// that allocation once for all of them (CUDA IPC lets a process open an allocation only once),
// and an engine that caches one tensor per GPU (LMDeploy's flattened_tensor) can view every slot
// through it. The oversize slot is an allocation of its own.
class SlotMemory {
 public:
  virtual ~SlotMemory() = default;
  virtual MemoryKind kind() const = 0;
  virtual int device() const = 0;
  virtual uint64_t bytes() const = 0;
  // Host address (host mode) or device pointer (CUDA) of the slot's first byte.
  virtual void* data() = 0;
  // What a client needs to map the slot's allocation: an shm name, or a cudaIpcMemHandle_t of
  // the allocation's base. Slots of one allocation share it.
  virtual std::string memory_handle() const = 0;
  // Where the slot lies in that allocation, and the allocation's size.
  virtual uint64_t allocation_offset() const { return 0; }
  virtual uint64_t allocation_bytes() const { return bytes(); }
  // The producer's "bucket written" signal: empty in host mode, a cudaIpcEventHandle_t on GPUs.
  // Each slot has its own, also in one allocation.
  virtual std::string event_handle() const = 0;
  // CRC-32 of the slot's first `bytes` bytes (see common/checksum.h), computed after the
  // producer's writes (on GPUs the slot's stream waits on the producer's event first).
  virtual absl::StatusOr<uint32_t> Checksum(uint64_t bytes) = 0;
  // crc32-sampled of the slot's first `span` bytes (common/checksum.h), after the producer's
  // writes as Checksum.
  virtual absl::StatusOr<uint32_t> SampledChecksum(uint64_t span) = 0;
  // Pull mode: copies the pieces into the slot once the producer's signal says the trainer's
  // tensors are ready, and returns once the copy is done. No checksum: the copy is wsyncd's own,
  // so there is no trainer write to check, and a fused checksum halves the copy's rate.
  virtual absl::Status FillFrom(const std::vector<SourcePiece>& pieces, uint64_t span) = 0;
  // DATA_LOSS when the slot no longer holds its bytes (a host-mode trainer truncated it), after
  // restoring its size for later buckets. Checked before a bucket is broadcast out of a slot that
  // wsyncd did not read first (no checksum), since the kernel's read is not guarded.
  virtual absl::Status CheckIntact() { return absl::OkStatus(); }
  // Returns once the bucket's bytes are written: the producer's event has completed (polled,
  // never blocking in the driver; DEADLINE_EXCEEDED after `timeout`). For readers that cannot wait
  // on the event themselves, such as an engine told of a bucket by a message rather than by a
  // handle it waits on. Host mode: the writes are done when the producer says so.
  virtual absl::Status WaitProducer(absl::Duration timeout) { return absl::OkStatus(); }
};

// One collective call: `count` elements of `dtype` starting `offset` bytes into the slot. The
// receivers' calls must use the same type and count (NCCL splits the work by element).
struct BroadcastPiece {
  uint64_t offset = 0;
  uint64_t count = 0;
  DType dtype = DType::kUint8;
  uint64_t bytes() const { return count * DTypeSize(dtype); }
};

// OUT_OF_RANGE unless every piece lies inside the slot.
absl::Status CheckPiecesFit(const SlotMemory& slot, const std::vector<BroadcastPiece>& pieces);
// For SlotMemory::FillFrom: OUT_OF_RANGE unless the span fits the slot and every piece lies
// inside the span.
absl::Status CheckFillFits(const SlotMemory& slot, const std::vector<SourcePiece>& pieces,
                           uint64_t span);

// Where one transfer's time went, seen from rank 0 (a broadcast; zero where the receivers read the
// bytes in place).
struct WireTiming {
  // Rank 0 had nothing queued between the previous broadcast's end and this one's start: the
  // daemon's (or its trainer's) share of the gap between transfers.
  double idle_seconds = 0;
  // From the start of rank 0's collective to its end: the wire time plus the wait for the
  // receivers to post theirs (the engines' share).
  double wire_seconds = 0;
};

// A collective group in which the daemon is rank 0 and the engine ranks are 1..world_size-1.
class RootCommunicator {
 public:
  virtual ~RootCommunicator() = default;
  // The 128 bytes engines read from the rendezvous store to join (an ncclUniqueId on GPUs).
  virtual const std::string& unique_id() const = 0;
  virtual int world_size() const = 0;
  // Queues the pieces' broadcasts, in order, after the producer's writes to the slot and after
  // every broadcast queued before; returns a ticket without waiting for the wire. The first call
  // waits (up to the deadline) for the peers to join, as NCCL's lazy connection does. The pieces'
  // offsets are into `base`: (pull mode) a trainer allocation laid out exactly as the bucket and
  // already checked against it, which then goes out with no copy; the slot orders it all the same.
  virtual absl::StatusOr<uint64_t> StartBroadcastFrom(SlotMemory& slot, const void* base,
                                                      const std::vector<BroadcastPiece>& pieces,
                                                      absl::Time deadline) = 0;
  // The same out of the slot's own memory, refused if a piece lies outside the slot.
  absl::StatusOr<uint64_t> StartBroadcast(SlotMemory& slot,
                                          const std::vector<BroadcastPiece>& pieces,
                                          absl::Time deadline) {
    if (absl::Status fits = CheckPiecesFit(slot, pieces); !fits.ok()) return fits;
    return StartBroadcastFrom(slot, slot.data(), pieces, deadline);
  }
  // Waits until the ticket's broadcasts have left rank 0, so the slot may be refilled. Tickets are
  // waited in the order they were issued. Errors name the ranks at fault; a deadline that passes
  // aborts the communicator.
  virtual absl::StatusOr<WireTiming> WaitBroadcast(uint64_t ticket, absl::Time deadline) = 0;
  // Start + wait of one byte range.
  absl::Status Broadcast(SlotMemory& slot, uint64_t offset, uint64_t bytes, absl::Time deadline) {
    auto ticket = StartBroadcast(slot, {BroadcastPiece{offset, bytes, DType::kUint8}}, deadline);
    if (!ticket.ok()) return ticket.status();
    return WaitBroadcast(*ticket, deadline).status();
  }
  // Takes part in the peers' one-element float32 SUM all-reduce and waits for it to finish.
  // vLLM's communicator runs exactly this right after ncclCommInitRank and before any other
  // collective, so a group of vLLM engines calls it once, before its first broadcast and while
  // the engines' init requests are in flight; a rank 0 that skips it deadlocks every rank.
  // Platforms without it answer UNIMPLEMENTED.
  virtual absl::Status WarmUpAllReduce(absl::Time deadline) {
    return absl::UnimplementedError("this communicator has no all-reduce");
  }
  // Breaks running and later operations (ncclCommAbort). Safe from any thread.
  virtual void Abort(absl::string_view reason) = 0;
  virtual std::string Describe() const = 0;
};

// A collective group joined as rank `rank` (1..world_size-1) by the root's unique id: the
// receiving side of RootCommunicator, for a wsyncd fed by another wsyncd (the node relay).
class PeerCommunicator {
 public:
  virtual ~PeerCommunicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Receives root 0's broadcasts of `pieces`, one per piece and in order (the root's pieces, with
  // the same counts and dtypes), each into the slot at its offset, and returns once every byte
  // has landed; on GPUs the slot's producer event is then recorded, so that whatever waits on it
  // (the local groups' launches) orders after the receive as after a trainer's copy. OUT_OF_RANGE,
  // with nothing received, unless every piece lies inside the slot. A deadline that passes aborts
  // the communicator; errors name the piece waited for.
  virtual absl::Status ReceiveInto(SlotMemory& slot, const std::vector<BroadcastPiece>& pieces,
                                   absl::Time deadline) = 0;
  // Breaks running and later receives. Safe from any thread. `reason` is logged and returned as
  // is: text from a peer is the caller's to sanitize.
  virtual void Abort(absl::string_view reason) = 0;
  virtual std::string Describe() const = 0;
};

// Where a relay's downstream keeps the last version it received whole, apart from its slots
// (docs/RELAY.md, "Resident version"): in host memory or on the GPU.
enum class ResidentMedium { kHost, kGpu };
absl::string_view ResidentMediumName(ResidentMedium medium);  // "host", "gpu"

// One bucket's bytes kept apart from the slots, in one medium, for as long as the object lives.
class ResidentMemory {
 public:
  virtual ~ResidentMemory() = default;
  virtual ResidentMedium medium() const = 0;
  virtual uint64_t bytes() const = 0;
  // Copies the slot's first bytes() bytes in, after the slot's producer's writes; done when it
  // returns. OUT_OF_RANGE when the slot is smaller.
  virtual absl::Status CopyFromSlot(SlotMemory& slot) = 0;
  // Copies them into the slot's first bytes() bytes; done when it returns, so whatever reads the
  // slot next (a checksum, a broadcast, an engine) sees them. OUT_OF_RANGE when the slot is
  // smaller.
  virtual absl::Status CopyToSlot(SlotMemory& slot) = 0;
  // The bytes, where this process's CPU may read them (host memory, pinned or not); nullptr on
  // a GPU.
  virtual const uint8_t* host_data() const = 0;
};

class Platform {
 public:
  virtual ~Platform() = default;
  virtual absl::string_view name() const = 0;
  // One slot, an allocation of its own (the oversize slot).
  virtual absl::StatusOr<std::unique_ptr<SlotMemory>> AllocateSlot(int device, uint64_t bytes) = 0;
  // `count` slots of `bytes` each as regions of one allocation, SlotStride(bytes) apart. The
  // allocation lives until its last slot is destroyed. The default makes separate allocations,
  // for platforms that cannot do better (test doubles).
  virtual absl::StatusOr<std::vector<std::unique_ptr<SlotMemory>>> AllocateSlots(int device,
                                                                                 uint32_t count,
                                                                                 uint64_t bytes);
  // `nccl_library` names the NCCL the group's engines run (a path or soname: NCCL connects only
  // peers of its own version, and each engine kind may bundle its own); "" is the platform's
  // default (wsyncd's --nccl-lib).
  virtual absl::StatusOr<std::unique_ptr<RootCommunicator>> CreateRootCommunicator(
      int device, int world_size, const std::string& nccl_library) = 0;
  // Joins the communicator whose root gave `unique_id`, as `rank` of `world_size`, on `device`;
  // returns once joined (NCCL: its init completed), or fails at the deadline.
  virtual absl::StatusOr<std::unique_ptr<PeerCommunicator>> JoinCommunicator(
      int device, const std::string& unique_id, int rank, int world_size,
      const std::string& nccl_library, absl::Time deadline);
  // Maps a trainer allocation announced for pull mode: a cudaIpcMemHandle_t on GPUs, a
  // shared-memory name in host mode. Fails unless it holds at least `bytes`. `session_tag` is the
  // announcing session's (OpenSession reply): in host mode only a segment that session's client
  // made is mapped (PERMISSION_DENIED otherwise), since a name could point at any file wsyncd can
  // read, a slot included.
  virtual absl::StatusOr<std::unique_ptr<SourceMemory>> MapSource(
      int device, const std::string& handle, uint64_t bytes, const std::string& session_tag) = 0;
  // The devices wsyncd can serve, by index, each as its GPU's UUID in the form torch prints
  // (str(torch.cuda.get_device_properties(d).uuid): "126c071a-1253-3d49-71ab-17c686b110d5").
  // Engines on the same GPUs see other indexes (CUDA_VISIBLE_DEVICES), never other UUIDs, so
  // colocated groups name their engines' GPUs by UUID.
  virtual absl::StatusOr<std::vector<std::string>> DeviceUuids() const = 0;
  // OK while every device answers; otherwise which one does not and why (a GPU that fell off
  // the bus, or a context with a sticky error, fails every later call: wsyncd needs a restart).
  virtual absl::Status CheckDevices() const { return absl::OkStatus(); }
  // Every NCCL library loaded so far, by the path or soname it was asked by, with its version
  // ("2.28.9"); empty where none is (host mode).
  virtual std::vector<std::pair<std::string, std::string>> LoadedNcclLibraries() const {
    return {};
  }
  // Memory for one resident bucket of `bytes` on `device` (kGpu) or in its host's memory
  // (kHost: pinned on GPUs, so copies run at the link's rate). RESOURCE_EXHAUSTED when the medium
  // has no room.
  virtual absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(int device,
                                                                           ResidentMedium medium,
                                                                           uint64_t bytes) {
    return absl::UnimplementedError("this platform keeps no resident copy");
  }
  // The version of the NCCL groups get when they name none (wsyncd's --nccl-lib), "2.28.9";
  // empty where none is loaded (host mode). Two daemons relay only between equal versions.
  virtual std::string DefaultNcclVersion() const { return ""; }
};

// A GPU UUID as DeviceUuids gives it: lower case, without nvidia-smi's "GPU-" prefix.
std::string NormalizeGpuUuid(absl::string_view uuid);
// The device whose UUID is `uuid` (either form), or NOT_FOUND naming it and the UUIDs there are.
absl::StatusOr<int> FindDeviceByUuid(const Platform& platform, absl::string_view uuid);

// The client's mapping of one daemon allocation, shared by the MappedSlots that are regions of
// it and unmapped when the last of them goes.
class MappedAllocation {
 public:
  virtual ~MappedAllocation() = default;
  // Host address (host mode) or device pointer (CUDA) of the allocation's first byte.
  virtual void* data() const = 0;
  virtual uint64_t bytes() const = 0;
};

struct SlotCopy {
  uint64_t offset = 0;  // destination offset in the slot
  const void* src = nullptr;
  uint64_t bytes = 0;
};

// The client's view of a slot.
class MappedSlot {
 public:
  virtual ~MappedSlot() = default;
  virtual uint64_t bytes() const = 0;
  // Host-visible address of the slot (host mode), or the device pointer (CUDA).
  virtual void* data() = 0;
  // Later copies, checksums and MarkWritten run on this CUDA stream (a cudaStream_t), ordered
  // after the work the caller queued there; nullptr: the slot's own stream. Host slots ignore it.
  virtual void UseStream(void* stream) {}
  // Copies host memory into the slot at `offset`.
  virtual absl::Status CopyIn(uint64_t offset, const void* src, uint64_t bytes) = 0;
  // Copies a whole bucket; the CUDA slot does it in one kernel launch.
  virtual absl::Status CopyBatch(const std::vector<SlotCopy>& copies) {
    for (const SlotCopy& c : copies) {
      if (absl::Status s = CopyIn(c.offset, c.src, c.bytes); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  virtual absl::StatusOr<uint32_t> Checksum(uint64_t bytes) = 0;
  // crc32-sampled of the slot's first `span` bytes (common/checksum.h), ordered after the copies
  // queued before it; returns once it is known, so the copies are done too.
  virtual absl::StatusOr<uint32_t> SampledChecksum(uint64_t span) = 0;
  // CopyBatch, then the checksum of the slot's first `span` bytes; the CUDA slot does both in one
  // kernel launch, reading the bytes back while they are still in L2.
  virtual absl::StatusOr<uint32_t> CopyBatchAndChecksum(const std::vector<SlotCopy>& copies,
                                                        uint64_t span) {
    if (absl::Status s = CopyBatch(copies); !s.ok()) return s;
    return Checksum(span);
  }
  // Before a refill: returns once the engines' reads of the slot's previous bucket are done on the
  // GPU. An engine that keeps a live view of the slot (LMDeploy with require_clone false) answers
  // its request with the load only queued, and records the slot's event after it
  // (docs/engines/lmdeploy.md); the event is then polled, never waited on blindly, so an engine
  // that died with the record pending costs DEADLINE_EXCEEDED after `timeout`, not a hung trainer.
  // Host slots have nothing to wait.
  virtual absl::Status WaitReaders(absl::Duration timeout) { return absl::OkStatus(); }
  // WaitReaders without waiting: true once those reads are done (or cannot be known: an event
  // that failed is reported by WaitReaders).
  virtual bool ReadersDone() { return true; }
  // Publishes the writes made so far to the daemon (records the slot event on GPUs).
  virtual absl::Status MarkWritten() = 0;
  // Returns once the writes published by MarkWritten are done (so their sources may be freed).
  virtual absl::Status WaitWritten() { return absl::OkStatus(); }
  // Pull mode: tells the daemon the caller's tensors are ready to be read. On GPUs it records the
  // slot's event only if the caller's stream still has work queued: an idle stream needs no
  // signal, and any GPU operation of the trainer's may wait for a time slice beside wsyncd.
  virtual absl::Status MarkReady() { return MarkWritten(); }
};

// The client's side of pull mode: where a tensor's allocation is and how wsyncd can map it.
struct ExportedSource {
  uint64_t allocation_id = 0;  // stable while the allocation lives
  std::string handle;          // what Platform::MapSource takes
  uint64_t allocation_bytes = 0;
  uint64_t offset = 0;  // of the tensor's first byte
};

class SourceExporter {
 public:
  virtual ~SourceExporter() = default;
  // Starts an update: every allocation's handle is checked afresh (a freed and re-made
  // allocation at the same address gets a new id).
  virtual void BeginUpdate() = 0;
  // NOT_FOUND when the memory cannot be exported (host memory, virtual-memory allocations): the
  // client then copies that bucket itself.
  virtual absl::StatusOr<ExportedSource> Export(const void* data, uint64_t bytes) = 0;
  // The first address of the allocation holding [data, data + bytes), exporting nothing: on GPUs
  // a lookup of the driver's address ranges, where Export also reads an IPC handle, which costs
  // far more per allocation. NOT_FOUND as Export.
  virtual absl::StatusOr<uintptr_t> AllocationStart(const void* data, uint64_t bytes) = 0;
};

}  // namespace wsync

#endif  // WSYNC_COMMON_GPU_SEAM_H_
