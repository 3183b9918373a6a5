#ifndef WSYNC_CLIENT_CPP_PUSH_STREAM_H_
#define WSYNC_CLIENT_CPP_PUSH_STREAM_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cpp/update_stream.h"
#include "common/bucket_planner.h"
#include "common/checksum.h"
#include "common/dtype.h"
#include "common/gpu_seam.h"

namespace wsync {

// A tensor the caller owns, in host or CUDA device memory.
struct TensorRef {
  std::string name;
  DType dtype = DType::kUint8;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  uint64_t bytes = 0;
  // Made by the caller for this push only (a gathered DTensor, a contiguous copy): in pull mode
  // its bucket is copied by the client, never mapped by wsyncd, whose mappings outlive the push.
  bool temporary = false;
};

struct PushProgress {
  uint64_t buckets_done = 0;
  uint64_t buckets_total = 0;  // 0 while the stream is still being fed
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;  // bytes added so far
  double seconds = 0;
};

struct EngineResultView {
  std::string engine;
  absl::Status status;
  std::string engine_version;  // as wsyncd read it ("" where the engine reports none)
  std::string weights_check;   // the check after the commit, where the group asks for one
  // Why it waits, paused, for a full version after this update; "" when it holds one whole.
  std::string needs_full_version;
  // What went wrong that the update did not fail for (a version label not set).
  std::vector<std::string> warnings;
  // A relay group's member: the engines it feeds, each with its outcome.
  std::vector<std::string> relayed;
};

struct PushResult {
  std::string update_id;
  uint64_t buckets = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  std::vector<EngineResultView> engines;
  // The daemon's per-bucket timing, summed, in wsync.v1.Timing's words: its check of the bytes,
  // the data path idle (daemon or trainer late), the bytes moving under wsyncd (a broadcast; 0
  // where engines read in place), the engines' answers after that, and the engines' wait for a
  // request the daemon had not yet written.
  double verify_seconds = 0;
  double idle_seconds = 0;
  double wire_seconds = 0;
  // Deprecated: idle_seconds and wire_seconds under their earlier names; still set.
  double idle_before_seconds = 0;
  double broadcast_seconds = 0;
  double answer_seconds = 0;
  double request_late_seconds = 0;
  // Per update: Begin to the first bucket's launch, and the engines' commit after the last bucket.
  double first_launch_seconds = 0;
  double finish_seconds = 0;
  uint64_t buckets_pulled = 0;  // buckets wsyncd copied out of the trainer's memory itself
  // Of those, buckets wsyncd broadcast straight from the trainer's memory (laid out as sent).
  uint64_t buckets_read_in_place = 0;
  // A relay group sending deltas: the bytes sent to its downstream members against the same
  // buckets dense, and of the elements compared with the base, the fraction that changed;
  // has_wire_volume false (and these 0) for groups that send the bytes as they are.
  bool has_wire_volume = false;
  uint64_t wire_sent_bytes = 0;
  uint64_t wire_dense_bytes = 0;
  double changed_fraction = 0;
  uint64_t elements_compared = 0;
  uint64_t elements_changed = 0;
  // The group's bucket rules the push's buckets followed (BucketRules::Describe: "none", "one
  // dtype per bucket", "close after 64 MiB", ...), as wsyncd announced them in UpdateStarted.
  std::string bucket_rules;
  double gib_per_second() const { return seconds > 0 ? bytes / seconds / (1ull << 30) : 0; }
};

struct PushOptions {
  std::function<void(const PushProgress&)> progress;
  // CUDA stream (cudaStream_t) the tensors were produced on: the copies into the slots run on it,
  // after the producer's work, without synchronising the device. nullptr: the slots' own streams.
  void* cuda_stream = nullptr;
  // Checksum the buckets this client fills (the daemon verifies them); false when the daemon runs
  // --checksum none. Which checksum, the update says (UpdateStarted.checksum); a daemon that does
  // not say gets the full CRC-32.
  bool checksums = true;
  // Shown in progress before the last bucket is known (0: unknown).
  uint64_t buckets_total = 0;
  // How many tensors the caller will add, when it knows (0: unknown). The bucket holding the last
  // of them is then sent marked last (Bucket.last) even when it closes before Commit; adding more
  // is refused, since a bucket already marked last cannot be taken back.
  uint64_t tensors_total = 0;
  // Pull mode (docs/PULL_MODE.md): wsyncd copies each bucket out of the trainer's memory itself,
  // so the trainer's process does no GPU work of its own; a bucket holding a tensor that cannot
  // be exported is copied by the client as usual. Tensors are released once wsyncd has read them.
  bool pull = false;
  // Leave push or pull to the group: wsyncd says in UpdateStarted (pull_preferred) which its
  // transport is fed fastest by, and `pull` is set from it (pull_bucket_bytes still asks for
  // pull). What Python's push(pull=None) does.
  bool pull_as_group_prefers = false;
  // A colocated group whose engines' TP ranks span GPUs takes one trainer rank per GPU, each from
  // a session on its own GPU, beginning the same version: wsyncd joins them into one update. The
  // rank's position among the group's GPUs, checked by wsyncd when set (-1: not sent; the
  // session's device alone picks the rank's place).
  int tp_rank = -1;
  // Pull mode only: plan buckets up to this many bytes instead of a slot's (0: a slot's). A bucket
  // larger than a slot is never copied: it must lie in one trainer allocation exactly as it is
  // sent (a flat parameter buffer), where wsyncd and the engines read it in place, so fewer,
  // larger requests carry the model (colocated zero copy needs no staging memory). wsyncd refuses
  // such a bucket otherwise, and the client refuses one holding memory it cannot export.
  uint64_t pull_bucket_bytes = 0;
  // How long a slot's refill waits for the engines still reading its previous bucket on the GPU
  // (MappedSlot::WaitReaders) before the update fails rather than hangs: an engine that keeps a
  // live view of the slot records its event after its load, which may outlive its answer.
  absl::Duration engine_read_timeout = absl::Seconds(60);
  SourceExporter* exporter = nullptr;  // set by Client::BeginPush
};

// The planner's form of the rules wsyncd sends in UpdateStarted; an unset message is no rule.
BucketRules BucketRulesFromProto(const v1::BucketRules& proto);

// Gives the session's oversize slot with room for `bytes` (mapping it, or a larger one, on first
// need): its index and mapping.
using OversizeSlotFn =
    std::function<absl::StatusOr<std::pair<uint32_t, MappedSlot*>>(uint64_t bytes)>;

// One update fed tensor by tensor: each bucket is copied into a free slot and sent as soon as it
// is full, so the caller never holds more than one slot's worth of tensors it could otherwise free
// (a generator that gathers DTensors one at a time stays at one tensor plus one bucket).
// Buckets follow the group's bucket rules from UpdateStarted. The update's final bucket is always
// marked last (Bucket.last), so an engine that must be told (LMDeploy's `finished`, vLLM's last
// chunk) needs no separate finishing request. A bucket that closes with the tensor just added (an
// oversize tensor alone, or the one that passes the rules' chunk size) may be the last: unless
// options.tensors_total says whether a tensor follows, it is copied into its slot at once (its
// tensors are released as usual) but its message to wsyncd waits for the next tensor (then it
// goes unmarked) or Commit (then marked). A bucket closed by the arrival of a tensor that does not
// fit is never the last and goes out at once.
class PushStream {
 public:
  // Starts the update; `slots` are the session's mapped slots.
  static absl::StatusOr<std::unique_ptr<PushStream>> Begin(
      v1::Trainer::Stub* stub, const std::string& session_id, const std::string& group,
      const std::string& version, std::vector<MappedSlot*> slots, OversizeSlotFn oversize,
      PushOptions options);
  // Aborts the update if it was neither committed nor aborted.
  ~PushStream();

  // Adds tensors in order. Their bytes must stay valid and unchanged until released() counts them.
  absl::Status Add(const std::vector<TensorRef>& tensors);
  // How many tensors, counted from the first added, the caller may free or change: copied into
  // slots, or (pull mode) read by wsyncd.
  uint64_t released() const {
    std::lock_guard<std::mutex> lock(mu_);
    return released_;
  }
  // Sends the last bucket, commits, and returns per-engine results.
  absl::StatusOr<PushResult> Commit();
  void Abort(const std::string& reason);
  // The rules this update's buckets follow (the group's, from UpdateStarted).
  const BucketRules& bucket_rules() const { return planner_.rules(); }
  // Replaces the bucket count shown in progress (e.g. once a whole list is planned under the
  // rules).
  void SetBucketsTotal(uint64_t buckets_total);

 private:
  PushStream(v1::Trainer::Stub* stub, std::vector<MappedSlot*> slots, OversizeSlotFn oversize,
             PushOptions options);
  // Waits for a free slot for the bucket (the oversize slot for an oversize bucket).
  absl::StatusOr<std::pair<uint32_t, MappedSlot*>> AcquireSlot(const PlannedBucket& bucket);
  void ReadEvents();
  // last: the caller knows no bucket follows (also set when options_.tensors_total says so).
  // hold: fill the slot but keep the message in held_wire_ (SendHeld sends it).
  absl::Status SendBucket(const PlannedBucket& bucket, bool last, bool hold = false);
  // Sends the held bucket's message, if any, marked last or not.
  void SendHeld(bool last);
  // Writes a bucket's message; a stream the daemon ended is noted for the next slot wait.
  void Transmit(const v1::Bucket& wire);
  // Pull mode: the bucket's sources, with announcements of allocations new to this update; false
  // when a tensor cannot be exported, or when `one_allocation` and they lie in several.
  bool DescribeSources(const std::vector<TensorRef>& tensors, bool one_allocation,
                       v1::Bucket* wire);
  // Releases the tensors of finished buckets at the front of `outstanding_` (mu_ held).
  void ReleaseFinishedLocked();
  absl::Status Fail(absl::Status status);

  UpdateStream stream_;
  std::vector<MappedSlot*> slots_;
  OversizeSlotFn oversize_;
  PushOptions options_;
  // What the buckets this client fills carry (UpdateStarted.checksum).
  ChecksumKind checksum_ = ChecksumKind::kCrc32;
  // The mode was left to the group, and wsyncd maps the trainer's memory anew each update: only
  // buckets that lie in one allocation are pulled (UpdateStarted.pull_one_allocation_per_bucket).
  bool pull_one_allocation_ = false;
  BucketPlanner planner_;  // replaced at Begin by one that follows the group's rules
  uint64_t added_ = 0;     // tensors added so far
  // The message of a bucket that closed with the last tensor added, its slot already filled, not
  // yet known to be the update's last.
  std::optional<v1::Bucket> held_wire_;
  uint64_t sequence_ = 0;
  std::set<uint64_t> announced_;  // pull mode: allocations announced in this update
  uint64_t buckets_pulled_ = 0;
  absl::Time t0_;
  absl::Status send_status_;
  bool ended_by_us_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TensorRef> pending_;  // added, not yet released; pending_[0] has index released_
  uint64_t released_ = 0;
  struct Outstanding {
    uint64_t sequence;
    size_t tensors;
    bool finished;  // copied by the client, or read by wsyncd (SourcesRead)
    // Pull mode: the slot whose event an engine that read the tensors in place records after its
    // load (LMDeploy, require_clone false, answers before the load is done): the tensors go back
    // to the caller only once it is reached.
    MappedSlot* readers = nullptr;
  };
  std::deque<Outstanding> outstanding_;  // sent buckets in order, not yet released
  std::deque<uint32_t> free_slots_;
  bool oversize_busy_ = false;  // the oversize slot holds a bucket not yet sent
  bool daemon_ended_ = false;
  v1::UpdateResult result_;
  bool have_result_ = false;
  PushProgress progress_;
  std::thread reader_;
};

}  // namespace wsync

#endif  // WSYNC_CLIENT_CPP_PUSH_STREAM_H_
