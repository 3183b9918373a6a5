#ifndef WSYNC_DAEMON_CORE_UPDATE_RUN_H_
#define WSYNC_DAEMON_CORE_UPDATE_RUN_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/manifest.h"
#include "daemon/core/buffer_pool.h"
#include "daemon/core/source_table.h"
#include "daemon/core/transport.h"
#include "daemon/core/weight_group.h"

namespace wsync {

// Where one bucket's time went (all in seconds). These are the names of the one timing
// vocabulary that results (wsync.v1.Timing), logs, metrics and `wsyncctl watch` all use.
struct BucketTiming {
  double verify = 0;  // checksum of the slot (pull mode: the copy into it) before sending
  // The data path had nothing queued before this bucket (daemon/trainer late); 0 for an update's
  // first bucket, whose wait is UpdateOutcome::first_launch_seconds instead.
  double idle = 0;
  // The bytes moving under wsyncd: rank 0's broadcast from its start to its end (the wire plus
  // the wait for the receivers to post theirs); 0 where the engines read the bytes in place (IPC),
  // whose reading is part of `answer`.
  double wire = 0;
  double answer = 0;  // from the sources becoming reusable to the engines' last answer
  // The engines had answered the previous bucket but this bucket's request was not yet written:
  // the daemon's share of the engines' wait (the rest of `wire` beyond the bytes' own time is
  // theirs).
  double request_late = 0;
  double total = 0;  // from the bucket's turn to the engines' last answer
};

struct UpdateOutcome {
  std::string update_id;
  absl::Status status;
  std::vector<EngineOutcome> engines;
  uint64_t buckets = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  BucketTiming bucket_totals;          // summed over the committed buckets
  uint64_t buckets_read_in_place = 0;  // pull mode, broadcast with no copy into a slot
  // Where the transport may send less than the bytes (relay deltas): what the committed buckets
  // put on the wire against their dense bytes.
  std::optional<WireVolume> wire_volume;
  // The sessions that fed the update.
  std::vector<std::string> sessions;
  // From the update's start to its first bucket's launch (requests written, broadcast queued):
  // the trainer's first bucket plus the daemon's checks, before anything is on the wire.
  double first_launch_seconds = 0;
  // The engines' commit after the last answer (version, cache flush, resume).
  double finish_seconds = 0;
};

// One engine of a running update, as far as it has come.
struct EngineProgressView {
  std::string engine;
  uint64_t buckets_answered = 0;
  double last_answer_seconds = 0;
  double total_answer_seconds = 0;
  std::string left_out;  // why the update goes on without it; empty while it takes part
};

// How far a running update has come (wsyncctl watch).
struct UpdateProgressView {
  std::string update_id;
  std::string group;
  std::string version;
  uint64_t buckets_done = 0;
  uint64_t bytes_done = 0;
  uint64_t buckets_planned = 0;  // the trainers' plan; 0 until one says
  uint64_t bytes_planned = 0;
  double seconds = 0;
  std::optional<WireVolume> wire_volume;  // as UpdateOutcome's, so far
  std::vector<EngineProgressView> engines;
};

// What the trainer hears while its update runs (the gRPC stream implements it).
class UpdateEvents {
 public:
  virtual ~UpdateEvents() = default;
  virtual void BucketDone(uint64_t sequence, uint64_t bytes, uint32_t tensors,
                          const BucketTiming& timing) = 0;
  virtual void SlotFree(uint32_t slot) = 0;
  // Pull mode: wsyncd is done with the bucket's tensors (copied out of the trainer's memory, or,
  // read in place, broadcast).
  virtual void SourcesRead(uint64_t sequence) = 0;
  // The update failed while the trainer may be waiting for a SlotFree that will never come; the
  // stream tells it now instead of at its next message.
  virtual void Failed(const UpdateOutcome& outcome) = 0;
};

struct UpdateContext {
  std::string update_id;
  std::string version;
  absl::Duration bucket_timeout = absl::Seconds(120);
  // What the trainer-filled buckets' checksums must be: kCrc32 where the bytes cross a wire,
  // kCrc32Sampled where the engines read them on the GPU that filled them; a bucket may always
  // carry the full CRC-32. kNone: nothing is compared.
  ChecksumKind checksum = ChecksumKind::kCrc32;
  // Told of each bucket that reached every engine (its bytes and time split); may be empty.
  std::function<void(uint64_t bytes, const BucketTiming& timing)> on_bucket;
};

// One update of one group, as a pipeline fed by one trainer session per feed of the group (one
// for a broadcast group; one per GPU for a colocated group whose engines' TP ranks span GPUs: the
// sessions join the update by group and version, and each feeds its own GPU's slots).
//
// Buckets are validated when they arrive (nothing of a refused bucket is sent). The k-th bucket of
// every feed makes the update's bucket k: each must have the same manifest, and the bucket goes
// out once every feed's share is there (a feed that never sends it fails the bucket at its
// deadline, naming the GPU). The sender thread verifies each share's checksum (or, in pull mode,
// fills the slot) and hands the bucket to the group's transport, which launches it behind the
// previous one (a broadcast transport writes the engines' requests and queues the broadcast, so
// request k+1 waits at the engine while bucket k is on the wire). The reuse thread frees each slot
// as soon as the transport says its sources may be reused, and the answer thread collects the
// engines' answers, so a slot waits for an answer only where the transport needs it. After a
// failure no later bucket is started. The trainers fill their next slots meanwhile.
//
// A group with streams (FeedsAreStreams: each trainer rank pushes its own part from its own GPU)
// takes each feed's buckets as buckets of their own instead, in the order they arrive, each sent
// from its feed's device; the update's last bucket is the one that comes last of the feeds' lasts.
//
// The update commits once every feed committed (each member's Commit waits for the others, up to
// the bucket timeout); one member's Abort ends it for all.
class UpdateRun {
 public:
  using DoneCallback = std::function<void(const UpdateOutcome&)>;
  // Feed `first` (session `session_id`, heard through `events`) begins the update; the others
  // join it.
  UpdateRun(UpdateContext context, std::shared_ptr<WeightGroup> group, BufferPool* pool,
            size_t first, const std::string& session_id, UpdateEvents* events,
            DoneCallback on_done);
  ~UpdateRun();

  const std::string& id() const { return context_.update_id; }
  const std::string& version() const { return context_.version; }
  uint32_t world_size() const;
  // What the trainer's planner must obey (the group's engines' union).
  const BucketRules& bucket_rules() const { return group_->bucket_rules(); }
  // Whether the group is fed fastest in pull mode (WeightGroup::pull_preferred).
  bool pull_preferred() const;
  // The checksum the trainer-filled buckets must carry (UpdateContext::checksum).
  ChecksumKind checksum() const { return context_.checksum; }
  // wsyncd closes its mappings of the trainers' memory when this update ends (a colocated group):
  // a pulled bucket lying in several allocations costs a mapping of each, every update.
  bool sources_mapped_per_update() const;
  const std::vector<TrainerFeed>& feeds() const { return feeds_; }

  // False once the update began to end (committed by every feed, aborted, or finished).
  bool accepting();
  // False once the update ended (its outcome is known); an update being committed still runs.
  bool running();
  // Session `session_id` feeds `feed` from now on. ALREADY_EXISTS if a session feeds it, and
  // the update's failure if it failed or ended.
  absl::Status Join(size_t feed, const std::string& session_id, UpdateEvents* events);

  // Refuses (and fails the update) on any problem with the bucket; the bucket's bytes go nowhere.
  // With `pulled` pieces wsyncd fills the slot itself from the trainer's memory (pull mode) and
  // the checksum is not compared; otherwise the trainer filled it and the checksum is verified.
  // `last`: the trainer says this is its last bucket of the update; `checksum_kind`: how the
  // trainer computed `checksum`.
  absl::Status SubmitBucket(size_t feed, uint32_t slot, BucketManifest manifest, uint32_t checksum,
                            uint64_t sequence, PulledSources pulled = {}, bool last = false,
                            ChecksumKind checksum_kind = ChecksumKind::kCrc32);
  // Waits until every feed committed, then commits; the same outcome for every member.
  UpdateOutcome Commit(size_t feed);
  UpdateOutcome Abort(absl::Status reason);
  // The first failure, if any (a failed update still needs Abort to finish it).
  absl::Status failure();
  // A trainer rank's plan for the update as it stands (0: unknown), for progress.
  void NotePlan(size_t feed, uint64_t buckets, uint64_t bytes);
  UpdateProgressView Progress();

 private:
  // One trainer session feeding one device's slots.
  struct Feed {
    std::string session_id;                      // empty until a session joins
    std::atomic<UpdateEvents*> events{nullptr};  // set once, when the session joins
    uint64_t submitted = 0;                      // buckets it has sent
    bool committed = false;
    bool said_last = false;        // streams: it marked its last bucket
    uint64_t planned_buckets = 0;  // streams: its own plan (NotePlan)
    uint64_t planned_bytes = 0;
  };
  // One feed's share of a bucket: its slot and how the bytes get there.
  struct Share {
    bool present = false;
    uint32_t slot = 0;
    SlotMemory* memory = nullptr;
    uint32_t checksum = 0;
    ChecksumKind checksum_kind = ChecksumKind::kCrc32;
    uint64_t sequence = 0;  // the feed's own bucket number, echoed to it
    PulledSources pulled;
    // Pull mode, when one trainer allocation holds the bucket exactly as it is laid out: the
    // engines read it there, with no copy into the slot.
    const void* direct = nullptr;
  };
  struct Pending {
    BucketManifest manifest;
    bool last = false;
    std::vector<Share> shares;  // one per feed
    size_t present = 0;
    size_t needed = 0;    // shares that make it whole: every feed's, or (streams) its one feed's
    absl::Time deadline;  // for the missing shares: the first one's arrival + bucket timeout
  };
  struct InFlight {
    Pending pending;
    std::unique_ptr<BucketHandle> handle;
    absl::Time turn;
    double verify_seconds = 0;
    // Filled by the reuse thread.
    absl::StatusOr<WireTiming> sent = absl::UnknownError("not sent yet");
    absl::Time sent_at;
    bool failed_before = false;  // an earlier bucket had failed: no SlotFree, no BucketDone
  };
  void SenderLoop();
  // Frees each slot, in order, as soon as the transport says its sources may be reused: with a
  // broadcast, once its bytes have left rank 0, whatever the engines' answers, so slots recycle
  // at the pace of the wire, not of the engines' HTTP handling.
  void ReuseLoop();
  // Collects the engines' answers, in order, and records each bucket's outcome.
  void AnswerLoop();
  // Ends the update when the trainer, whose turn it is (nothing queued or in flight for the
  // engines), sent nothing for the bucket timeout: before its first bucket or between buckets.
  // Without it a trainer that begins an update and goes silent keeps the engines paused.
  void IdleLoop();
  bool TrainersTurnLocked() const;
  // Takes the next item of `queue` once there is one (marking it failed_before if the update has
  // failed); false once `done` is set and the queue is empty.
  bool TakeNext(std::deque<InFlight>& queue, const bool& done, InFlight* out);
  // How far one feed got: its GPU, and its session's buckets or that no session joined.
  std::string FeedProgress(size_t feed) const;
  // Why bucket `index` (at the queue's front, incomplete) lacks shares: the feeds that sent none.
  std::string MissingShares(uint64_t index, const Pending& p) const;
  // Push mode: compares the slot's checksum with the trainer's (with checksums off, only checks
  // that the slot still holds its bytes).
  absl::Status Verify(size_t feed, const Share& s, uint64_t span);
  // Pull mode: copies the trainer's tensors into the slot (after the trainer's ready signal).
  absl::Status Fill(size_t feed, const Share& s, uint64_t span);
  // Pull mode, read in place: the engines read the trainer's allocation with no read of
  // wsyncd's before it (the kernel's is not guarded), so first check it still holds its bytes.
  absl::Status CheckInPlace(size_t feed, const Share& s);
  // Pull mode: where the bucket's bytes already lie as one run in one trainer allocation, in the
  // bucket's layout; null when they must be copied.
  const void* DirectSource(const PulledSources& pulled, const BucketManifest& manifest) const;
  // Records the first failure and tells the trainers at once (once).
  void ReportFailure(absl::Status status);
  void ReleaseSlot(size_t feed, uint32_t slot, SlotState from);
  void ReleaseShares(const Pending& p, SlotState from);
  template <typename Fn>
  void ForEachJoined(Fn fn);
  void Fail(absl::Status status);
  // `tell_every_feed`: the failure goes to every member's stream, also the caller's (a member
  // hears it from its own call's outcome otherwise).
  UpdateOutcome Finish(bool commit, absl::Status reason, bool tell_every_feed = false);

  UpdateContext context_;
  std::shared_ptr<WeightGroup> group_;
  const std::vector<TrainerFeed> feeds_;
  // Each feed sends buckets of its own (FeedsAreStreams), not its share of every bucket.
  const bool streams_;
  BufferPool* pool_;
  DoneCallback on_done_;
  const absl::Time started_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Feed> feed_state_;  // one per feeds_ entry
  // Buckets being assembled or waiting for the sender; the front is bucket taken_.
  std::deque<Pending> queue_;
  uint64_t taken_ = 0;
  std::deque<InFlight> in_flight_;  // started, sources not yet reusable
  std::deque<InFlight> sent_;       // sources reusable (or failed), answers not yet collected
  absl::Time previous_answered_at_ = absl::InfinitePast();  // answer thread only
  bool first_done_ = false;                                 // answer thread only
  absl::Time first_launch_ = absl::InfinitePast();          // guarded by mu_
  uint64_t transfers_started_ = 0;                          // buckets handed to the reuse thread
  uint64_t transfers_settled_ = 0;  // of those, answered or failed (and recorded)
  bool sender_done_ = false;
  bool sent_loop_done_ = false;
  bool failure_reported_ = false;
  bool closing_ = false;
  bool finishing_ = false;  // a member is finishing the update; the others wait for outcome_
  bool finished_ = false;
  UpdateOutcome outcome_;  // once finished_
  absl::Status failure_;
  std::set<std::string> names_;
  std::vector<EngineOutcome> bucket_outcomes_;
  // Per engine, in the order they first answered: what progress reports.
  std::vector<EngineProgressView> engine_progress_;
  uint64_t buckets_planned_ = 0;
  uint64_t bytes_planned_ = 0;
  uint64_t buckets_ = 0;
  uint64_t buckets_read_in_place_ = 0;
  std::optional<WireVolume> wire_volume_;
  uint64_t bytes_ = 0;
  BucketTiming totals_;
  std::thread sender_;
  std::thread reuse_thread_;
  std::thread answer_thread_;
  std::thread idle_thread_;
  // The last sign of progress: the start, a feed joining, a bucket received, taken by the sender
  // or settled.
  absl::Time last_progress_;
};

// One trainer session's part in an update: what its stream calls. Members of one update share
// its run; a member dropped without Commit or Abort aborts the update.
class UpdateMember {
 public:
  UpdateMember(std::shared_ptr<UpdateRun> run, size_t feed) : run_(std::move(run)), feed_(feed) {}
  ~UpdateMember();

  const std::string& id() const { return run_->id(); }
  uint32_t world_size() const { return run_->world_size(); }
  const BucketRules& bucket_rules() const { return run_->bucket_rules(); }
  bool pull_preferred() const { return run_->pull_preferred(); }
  ChecksumKind checksum() const { return run_->checksum(); }
  bool sources_mapped_per_update() const { return run_->sources_mapped_per_update(); }
  absl::Status SubmitBucket(uint32_t slot, BucketManifest manifest, uint32_t checksum,
                            uint64_t sequence, PulledSources pulled = {}, bool last = false,
                            ChecksumKind checksum_kind = ChecksumKind::kCrc32) {
    return run_->SubmitBucket(feed_, slot, std::move(manifest), checksum, sequence,
                              std::move(pulled), last, checksum_kind);
  }
  UpdateOutcome Commit();
  UpdateOutcome Abort(absl::Status reason);
  absl::Status failure() { return run_->failure(); }
  void NotePlan(uint64_t buckets, uint64_t bytes) { run_->NotePlan(feed_, buckets, bytes); }

 private:
  std::shared_ptr<UpdateRun> run_;
  const size_t feed_;
  bool finished_ = false;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_UPDATE_RUN_H_
