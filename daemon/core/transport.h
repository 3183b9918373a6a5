#ifndef WSYNC_DAEMON_CORE_TRANSPORT_H_
#define WSYNC_DAEMON_CORE_TRANSPORT_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/core/group_spec.h"
#include "daemon/core/wire_volume.h"

namespace wsync {

// One place a bucket's bytes lie: a slot of one device, or (pull mode, read in place) a trainer
// allocation laid out exactly as the bucket, which the slot still orders. A bucket has one source
// per trainer rank that feeds it (one today; a colocated TP group has one per GPU).
struct BucketSource {
  int device = 0;
  SlotMemory* slot = nullptr;
  const void* base = nullptr;  // null: the slot's own memory
  // With `base`: the trainer allocation it lies in, which a colocated engine maps itself.
  const SourceMemory* base_memory = nullptr;
};

// One bucket on its way to a group's engines, from its launch to their answers. The two moments
// that matter to the update are reported apart, because transports differ on them: a broadcast's
// sources may be refilled once the bytes have left rank 0, long before the engines answer, while
// engines that read wsyncd's memory through CUDA IPC are done with it only when they answer.
class BucketHandle {
 public:
  virtual ~BucketHandle() = default;
  // True when everything was launched (requests written, data movement queued); a failed launch
  // is reported by WaitReusable and WaitAnswered.
  virtual bool launched() const = 0;
  // Waits until the bucket's sources may be refilled or freed. Called once, before WaitAnswered.
  virtual absl::StatusOr<WireTiming> WaitReusable() = 0;
  // Waits for every engine's answer. The error names the engines (or ranks) at fault.
  virtual absl::Status WaitAnswered(std::vector<EngineOutcome>* outcomes) = 0;
  // When the last engine request was fully written (InfinitePast unless all were).
  virtual absl::Time requests_written_at() const = 0;
  // When the last engine answered (after WaitAnswered; InfinitePast before).
  virtual absl::Time answered_at() const = 0;
  // What the bucket put on the wire, where the transport may send less than its bytes; nullopt
  // (the default) where it sends them as they are.
  virtual std::optional<WireVolume> volume() const { return std::nullopt; }
};

// How one group's buckets reach its engines: its rendezvous, the engines' membership, and each
// bucket's data movement paired with its engine requests. A WeightGroup owns one and drives it
// through the group's state machine; calls come from one thread at a time except StartBucket's
// handles, which the update's threads wait on.
class Transport {
 public:
  virtual ~Transport() = default;
  // Brings every engine in (rendezvous, group join). On failure nothing of it is left, on wsyncd
  // or on the engines that did join.
  virtual absl::Status Form() = 0;
  // Asks the engines to leave what Form made, then frees it; best effort.
  virtual void Disband() = 0;
  // Frees what Form made without asking the engines (they are gone, or never joined).
  virtual void Release(absl::string_view why) = 0;
  // Asks every engine to drop a group named `engine_group` that nothing here holds: one an earlier
  // wsyncd formed and never disbanded (it died). Engines refuse to join a second group of a name
  // they hold. One status per engine, in engine order: UNIMPLEMENTED where the engine has no way
  // to drop a group; any other error may just mean it held none.
  virtual std::vector<absl::Status> LeaveStale(const std::string& engine_group) = 0;
  // FAILED_PRECONDITION saying what was lost when an engine lost what Form made (it restarted or
  // died since), so the next update must form again.
  virtual absl::Status CheckFormed() const = 0;
  // Opens what an update's buckets need (the engines' request channels).
  virtual absl::Status BeginUpdate(const UpdateInfo& update) = 0;
  // Launches one bucket: every engine's request, then the data movement. A bucket that fails
  // reports it through the handle and the group's failure hook. An error returned here means no
  // engine was sent anything of this bucket (the group counts on it: an engine that received
  // nothing of an update that does not commit is resumed, not kept paused).
  virtual absl::StatusOr<std::unique_ptr<BucketHandle>> StartBucket(
      const std::vector<BucketSource>& sources, const BucketManifest& manifest,
      const BucketContext& context, absl::Time deadline) = 0;
  // After the last bucket of an update that commits, before any engine records its version:
  // ends what carries the buckets where that is more than the requests (a stream's final steps,
  // where the engine post-processes its weights), and returns its outcome.
  virtual absl::Status FinishBuckets(absl::Time deadline) { return absl::OkStatus(); }
  // Ends the update's requests still open (their answers no longer matter).
  virtual void EndUpdate(absl::string_view why) = 0;

  // Ranks in the group, wsyncd's included.
  virtual uint32_t world_size() const = 0;
  // Where engines meet wsyncd ("host:port"), or "" while there is no meeting point.
  virtual std::string rendezvous() const = 0;
  // The engines (URLs) whose join failed in the last Form; empty when it succeeded or failed
  // before any engine was asked.
  virtual std::vector<std::string> EnginesFailedToJoin() const { return {}; }
  // The engines the open update went on without (TransportEnv::engines_needed), by URL, with
  // why; empty where every engine took every bucket, and on transports that drop none.
  virtual std::map<std::string, absl::Status> DroppedEngines() const { return {}; }
  virtual std::string Describe() const = 0;
};

// Where a group's transport listens and how long it waits for engines to join.
struct TransportOptions {
  // "" binds to the advertise address, so the stores and collectives are not on every interface.
  std::string bind_address;
  std::string advertise_address = "127.0.0.1";
  absl::Duration registration_timeout = absl::Seconds(10);
  // Where a transport puts the local sockets its engines connect to (the IPC stream's "ipc://"
  // paths; the config's and flag's ipc_socket_dir): a directory wsyncd and the engines both see.
  std::string socket_dir = "/tmp";
};

// What a transport is made from. The adapters belong to the group and outlive the transport.
struct TransportEnv {
  GroupSpec spec;
  // The name the engines know the group by: the spec's name and wsyncd's incarnation.
  std::string engine_group;
  // Store ports an earlier wsyncd used for this group, which a new store must not take.
  std::vector<uint16_t> avoid_store_ports;
  Platform* platform = nullptr;
  std::vector<EngineAdapter*> adapters;
  // How many of `adapters` an update needs (a quorum group); 0: all. Where engines are
  // independent of each other (CUDA IPC requests), a transport may drop an engine whose bucket
  // failed from the rest of the update while this many remain, instead of failing the bucket.
  size_t engines_needed = 0;
  TransportOptions options;
  // Called once per failed bucket, from the update's threads: the group is broken.
  std::function<void(const absl::Status&)> on_bucket_failed;
};

using TransportFactory =
    std::function<absl::StatusOr<std::unique_ptr<Transport>>(TransportEnv env)>;

// How groups get their adapters and transports: the engines and transport libraries provide the
// real ones (daemon/group_factories.h), tests provide fakes. The core never names one.
struct GroupFactories {
  AdapterFactory adapter;
  TransportFactory transport;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_TRANSPORT_H_
