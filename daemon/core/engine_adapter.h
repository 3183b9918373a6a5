#ifndef WSYNC_DAEMON_CORE_ENGINE_ADAPTER_H_
#define WSYNC_DAEMON_CORE_ENGINE_ADAPTER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/bucket_planner.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/group_spec.h"
#include "daemon/core/http_reply.h"

namespace wsync {

struct EngineEndpoint {
  std::string url;
  uint32_t ranks = 1;        // ranks this engine adds to the group (its TP size)
  uint32_t rank_offset = 1;  // its first rank in the group
};

// How an engine's ranks can join a collective with wsyncd.
enum class RendezvousMode {
  kTorchStore,      // torch's TCPStore: each rank's ProcessGroupNCCL reads the NCCL id from it
  kUniqueIdInInit,  // the NCCL unique id travels in the init request; no store
  kStatelessStore,  // a TCPStore read the way a stateless process group (no torch.distributed)
                    // reads it: a rank's keys, then the NCCL id
};

// Where engines meet wsyncd to join one instance of a group's collective.
struct Rendezvous {
  std::string master_address;  // the store ("" and port 0 without one)
  uint16_t master_port = 0;
  uint32_t world_size = 0;
  std::string group_name;
  RendezvousMode mode = RendezvousMode::kTorchStore;
  // kUniqueIdInInit: rank 0's 128-byte id, which the init request carries; "" otherwise.
  std::string unique_id;
};

// What `wsyncctl engines` shows of an engine, read from it at the time of asking.
struct EngineHealth {
  bool healthy = false;
  // As the engine reports it; "" for an engine without a version route (LMDeploy).
  std::string engine_version;
  // The payload variant wsyncd speaks to it, chosen from the version or the routes it serves:
  // "unsupported" (with the reason in error) for a server wsyncd would refuse.
  std::string variant;
  bool sleeping = false;  // its weights or KV cache are released (a sleep route)
  std::string weight_version;
  std::string error;
};

// One HTTP POST with a JSON body.
struct EngineRequest {
  std::string path;
  std::string json_body;
};

// One TP rank's view of a bucket on the CUDA-IPC data path: the memory, on the rank's own GPU,
// that the rank maps by handle and reads the bucket from. An allocation is presented whole (one
// storage per allocation: torch caches a mapping by handle and storage offset, so every bucket of
// a device's slots, regions of one allocation, reuses the first mapping), with the bucket at
// `offset` in it (the slot's offset in the allocation, or the bucket's in a trainer allocation).
struct IpcBucketView {
  std::string gpu_uuid;  // the rank's GPU, as torch prints it
  MemoryKind memory_kind = MemoryKind::kCudaIpc;
  // A cudaIpcMemHandle_t of the allocation's base (64 bytes); host mode: the shm name.
  std::string memory_handle;
  uint64_t allocation_bytes = 0;
  uint64_t offset = 0;  // of the bucket's first byte
  // A cudaIpcEventHandle_t the rank waits on before reading (recorded after the bucket was
  // written), or "" when the bytes are ready already.
  std::string event_handle;
};

// One TP rank of an update streamed over per-rank sockets: the GPU it runs on, as torch prints
// its UUID, and the address wsyncd listens on for that rank ("ipc://...").
struct IpcStreamRank {
  std::string gpu_uuid;
  std::string address;
};

struct EngineOutcome {
  EngineOutcome() = default;
  EngineOutcome(std::string engine, absl::Status status, std::string engine_version = "",
                std::string weights_check = "")
      : engine(std::move(engine)),
        status(std::move(status)),
        engine_version(std::move(engine_version)),
        weights_check(std::move(weights_check)) {}

  std::string engine;
  absl::Status status;
  // The engine's version as its last Probe read it (EngineAdapter::probed_version).
  std::string engine_version;
  // The check of its weights after the commit, when the group asks for one: "agrees with ...",
  // "differs from ...", or why it could not run; "" when the group asks for none.
  std::string weights_check;
  // Why, after this update, the engine waits paused for a full version (it may hold part of a
  // version that did not land on it); "" when it holds one version whole.
  std::string needs_full_version;
  // From its bucket request written to its answer (a pipelined request includes its wait behind
  // the previous bucket); 0 where not measured.
  double answer_seconds = 0;
};

// An engine's checksums of the weights it serves, by the engine's own tensor key (which names the
// rank or shard it lies on), as its checker route reports them. Engines of one group and TP size
// hold the same shards, so equal weights give equal maps.
using WeightChecksums = std::map<std::string, std::string>;

struct AdapterTimeouts {
  absl::Duration control = absl::Seconds(30);  // init, pause, resume, version, destroy
  absl::Duration probe = absl::Seconds(5);     // health
  // An engine's checksums of its weights (a pass over all of them on every rank).
  absl::Duration checksum = absl::Minutes(5);
};

// The update an engine is taking part in.
struct UpdateInfo {
  std::string update_id;
  std::string version;
};

// What every bucket request knows of its update.
struct BucketContext {
  std::string update_id;
  std::string version;
  uint64_t index = 0;  // 0-based, in the order the buckets reach the engines
  // The trainer's last bucket of the update, when its client said so; false when unknown.
  bool last = false;
};

// How a bucket's bytes can reach an engine.
enum class DataPath {
  kBroadcast,  // NCCL broadcast from wsyncd as rank 0 (disaggregated)
  kCudaIpc,    // IPC handles of wsyncd's buffers or the trainer's memory (colocated)
  // Colocated, mapped once per update: one request opens the update, each TP rank maps its
  // buffer once, then takes each bucket's metadata as a message on its own socket
  // (checkpoint-engine's ZMQ protocol, which SGLang's /update_weights_from_ipc speaks).
  kCudaIpcStream,
};

absl::string_view RendezvousModeName(RendezvousMode mode);
absl::string_view DataPathName(DataPath path);

// What an adapter can do, asked before a group forms (in the manner of NIXL's backends).
struct AdapterCapabilities {
  std::vector<RendezvousMode> rendezvous;
  std::vector<DataPath> data_paths;
  // What the engine demands of a bucket; the group's union goes to the client's planner.
  BucketRules bucket_rules;
  // Broadcast groups: DestroyBroadcastGroup makes the engine's ranks tear their communicator down
  // with rank 0 (torch finalizes it with its peers). False for an engine with no such route
  // (vLLM): rank 0 then aborts its side alone, since a finalize would wait for peers that never
  // take part.
  bool leaves_broadcast_group = true;

  bool Supports(DataPath path) const;
  bool Supports(RendezvousMode mode) const;
};

// One engine endpoint of one weight group, speaking that engine's own HTTP API. Calls are
// thread-safe; the group runs them concurrently across its engines.
//
// The lifecycle calls are required of every engine. The data-path hooks are optional: each
// defaults to UNIMPLEMENTED, and an adapter overrides those of the data paths its Capabilities
// name; a transport calls only hooks of its own data path.
class EngineAdapter {
 public:
  virtual ~EngineAdapter() = default;
  virtual const EngineEndpoint& endpoint() const = 0;
  // The engine's first rank when its group forms without some of its engines (a quorum group
  // renumbers the ones it keeps). Called only between updates, while no other call runs.
  virtual void SetRankOffset(uint32_t rank_offset) = 0;
  virtual AdapterCapabilities Capabilities() const = 0;

  // Checks version, parallel sizes and anything else that would make the group fail later.
  virtual absl::Status Probe() = 0;
  virtual EngineHealth Health() = 0;
  // Checks a bucket against what this engine can receive, before any byte moves.
  virtual absl::Status ValidateBucket(const BucketManifest& manifest) const = 0;
  virtual absl::Status PauseGeneration() = 0;
  virtual absl::Status ResumeGeneration() = 0;
  // Called once generation is paused, before the update's first bucket (an engine that needs
  // its updates opened, or memory back, does it here). Most engines need nothing.
  virtual absl::Status BeginUpdate(const UpdateInfo& update) { return absl::OkStatus(); }
  // An update that reached the engine ended without its commit: the engine stays paused (it may
  // hold part of that version), but what the update opened at the engine (a weight-update
  // session) is closed, so that the next update can open its own. Best effort; most engines
  // open nothing.
  virtual void AbandonUpdate() {}
  // True when BeginUpdate leaves the engine's weights undefined until the update's buckets fill
  // them (SGLang resuming the memory of weights training released): such an engine counts as
  // reached by the update from its begin, and is never resumed by an update that did not commit.
  virtual bool BeginLeavesWeightsUndefined() const { return false; }
  // Records the version, flushes caches computed with old weights, resumes generation.
  virtual absl::Status FinishUpdate(const UpdateInfo& update) = 0;
  // OK when the engine's answer to one of its bucket requests says it loaded the bucket.
  virtual absl::Status CheckBucketReply(const HttpReply& reply) const = 0;
  // The version the last successful Probe read ("" before one, or where the engine reports none).
  virtual std::string probed_version() const { return ""; }
  // How an operator resumes the engine's generation by hand ("POST /resume"), for the logs that
  // ask for it.
  virtual std::string ManualResumeHint() const { return "its engine's resume route"; }
  // The engine's checksums of the weights it serves (SGLang /weights_checker, vLLM
  // /weight_checker), asked after a commit, with generation resumed; UNIMPLEMENTED where the
  // engine has no checker.
  virtual absl::StatusOr<WeightChecksums> ChecksumWeights() {
    return absl::UnimplementedError("this engine kind has no weight checker");
  }

  // --- DataPath::kBroadcast (optional) ---
  // Asks the engine's ranks to join the group's collective; returns once they have (or failed).
  virtual absl::Status InitBroadcastGroup(const Rendezvous& rendezvous);
  virtual absl::Status DestroyBroadcastGroup(const std::string& group_name);
  // The bucket's update request; the engine answers once it has received (through the
  // broadcast, meanwhile) and loaded the bucket.
  virtual absl::StatusOr<EngineRequest> BroadcastBucketRequest(const BucketManifest& manifest,
                                                               const std::string& group_name,
                                                               const BucketContext& context) const;
  // The collective calls the engine's receive expects for the bucket, in order.
  virtual absl::StatusOr<std::vector<BroadcastPiece>> BroadcastPieces(
      const BucketManifest& manifest) const;

  // --- DataPath::kCudaIpc (optional) ---
  // The bucket's update request, one view per TP rank (rank i's on its GPU); the engine answers
  // once every rank has loaded the bucket, and only then may the views' memory be refilled.
  virtual absl::StatusOr<EngineRequest> IpcBucketRequest(const BucketManifest& manifest,
                                                         const std::vector<IpcBucketView>& ranks,
                                                         const BucketContext& context) const;

  // --- DataPath::kCudaIpcStream (optional) ---
  // The request that opens an update's stream: each TP rank connects to its address (`ranks` in
  // TP-rank order) and takes the buckets there; the engine answers once every rank is done, and
  // CheckBucketReply judges that answer.
  virtual absl::StatusOr<EngineRequest> IpcStreamRequest(
      const UpdateInfo& update, const std::vector<IpcStreamRank>& ranks) const;
};

// Runs `fn` on every adapter at once and returns each one's status, in adapter order.
std::vector<absl::Status> OnEachEngine(const std::vector<EngineAdapter*>& adapters,
                                       const std::function<absl::Status(EngineAdapter&)>& fn);
// The first error of OnEachEngine's results, in adapter order; OK when every engine succeeded.
absl::Status FirstError(const std::vector<absl::Status>& results);

// Makes the adapter of one engine of a group (the engine kind is the spec's).
using AdapterFactory = std::function<absl::StatusOr<std::unique_ptr<EngineAdapter>>(
    const GroupSpec& spec, const EngineEndpoint& endpoint, const AdapterTimeouts& timeouts)>;

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_ENGINE_ADAPTER_H_
