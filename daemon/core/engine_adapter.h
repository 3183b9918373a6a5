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
#include "common/checksum.h"
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
  // What went wrong at its commit that the update did not fail for (EngineAdapter::
  // TakeCommitWarnings): every byte landed, a label did not.
  std::vector<std::string> warnings;
  // Where the engine is a daemon feeding engines of its own (a relay's downstream wsyncd): each
  // of those engines with its outcome, one line each ("rollout-1 engine http://...: committed").
  std::vector<std::string> relayed;
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
  // A bucket's deadline (--bucket-timeout): how long a relay member may say nothing while it
  // commits before it is dropped.
  absl::Duration bucket = absl::Minutes(2);
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
  // The full CRC-32 of the bucket's span, verified against the slot before launch, where the
  // trainer sent one (push mode, checksums on); kNone otherwise. A transport that passes the
  // bytes on to another wsyncd hands it on, so the bytes are checked where they land.
  uint32_t checksum = 0;
  ChecksumKind checksum_kind = ChecksumKind::kNone;
};

// What an adapter can do, asked before a group forms (in the manner of NIXL's backends). The
// data paths it speaks are not listed here: they are its bindings (EngineAdapter::Binding).
struct AdapterCapabilities {
  // What the engine demands of a bucket; the group's union goes to the client's planner.
  BucketRules bucket_rules;
};

// One way a bucket's bytes reach an engine (a data path), as one engine kind speaks it. Each
// transport defines the interface of the paths it drives, derived from this one
// (daemon/transport/<transport>/*_binding.h); an engine kind implements the paths it speaks, one
// file each (daemon/engines/<kind>/<kind>_<path>_binding.*). The core only picks one per engine,
// by name, among the paths the group's transport drives (TransportKind::data_paths).
class DataPathBinding {
 public:
  virtual ~DataPathBinding() = default;
  // The path's name, as transports list it ("broadcast").
  virtual absl::string_view data_path() const = 0;
};

// One engine endpoint of one weight group, speaking that engine's own HTTP API. Calls are
// thread-safe; the group runs them concurrently across its engines.
//
// The lifecycle calls are required of every engine. What moves buckets is a binding per data path
// the engine speaks (DataPathBinding); the group picks one when it is made (UseDataPath), and the
// adapter's Probe, ValidateBucket and Health include what that path needs.
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
  // What the last FinishUpdate let pass rather than fail the update for (a route that only
  // labels the version answered an error), taken once; none by default.
  virtual std::vector<std::string> TakeCommitWarnings() { return {}; }
  // Where the engine is a daemon feeding engines of its own (a relay's downstream wsyncd): the
  // outcome of each of those at the last FinishUpdate (EngineOutcome::relayed), taken once; none
  // by default.
  virtual std::vector<std::string> TakeRelayedOutcomes() { return {}; }
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

  // The adapter's binding of `data_path`, or null where the engine does not speak it (or its
  // group's options turned it off). Owned by the adapter; the same object on every call.
  virtual DataPathBinding* Binding(absl::string_view data_path) { return nullptr; }

  // Picks the binding the group's transport drives this engine through; FAILED_PRECONDITION
  // where the adapter has none of that name. Called once, before any other call but Capabilities
  // and the binding queries. An adapter that overrides it calls this one first.
  virtual absl::Status UseDataPath(absl::string_view data_path);
  // The picked binding; null before UseDataPath.
  DataPathBinding* used_binding() const { return used_; }

 private:
  DataPathBinding* used_ = nullptr;
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
