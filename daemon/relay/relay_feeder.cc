#include "daemon/relay/relay_feeder.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/secret_file.h"
#include "common/status_macros.h"
#include "common/ticker.h"
#include "daemon/core/peer_text.h"
#include "daemon/core/trainer_feeds.h"
#include "daemon/relay/ordered_receiver.h"
#include "daemon/relay/relay_channel.h"
#include "daemon/relay/relay_frames.h"
#include "daemon/relay/resident_base.h"
#include "daemon/relay/subscription.h"
#include "daemon/wire/engine_result_proto.h"
#include "grpcpp/grpcpp.h"
#include "wsync/v1/relay.grpc.pb.h"

namespace wsync {
namespace {

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

v1::RelayReply ReplyOf(const absl::Status& s) {
  v1::RelayReply reply;
  reply.set_code(static_cast<int>(s.code()));
  reply.set_message(std::string(s.message()));
  return reply;
}

// Writes the subscription and reads the upstream's answer, both within `limit` (an upstream
// alive but silent is not waited for: the stream is cancelled and the feed tries again).
bool SubscribeWithin(grpc::ClientReaderWriter<v1::RelayUp, v1::RelayDown>* stream,
                     grpc::ClientContext* context, const v1::RelayUp& subscribe,
                     v1::RelayDown* answer, absl::Duration limit) {
  std::mutex mu;
  std::condition_variable cv;
  bool answered = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, absl::ToChronoMilliseconds(limit), [&] { return answered; })) {
      context->TryCancel();
    }
  });
  const bool admitted = stream->Write(subscribe) && stream->Read(answer) && answer->has_admitted();
  {
    std::lock_guard<std::mutex> lock(mu);
    answered = true;
  }
  cv.notify_all();
  watchdog.join();
  return admitted;
}

}  // namespace

absl::Status ValidateRelayFeed(const RelayFeedOptions& o) {
  if (o.upstream.empty() || o.upstream.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("relay feed: upstream must be the upstream wsyncd's --listen host:port, not '",
                     o.upstream, "'"));
  }
  if (o.group.empty()) return absl::InvalidArgumentError("relay feed: no upstream group named");
  if (o.token_file.empty() || o.ca_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("relay feed from ", o.upstream,
                     ": a relay subscription needs TLS and a relay token "
                     "(token_file and ca_file)"));
  }
  if (!o.node.empty()) WSYNC_RETURN_IF_ERROR(CheckRelayNodeName(o.node));
  return absl::OkStatus();
}

absl::Status SetRelayFeedKey(const std::string& key, const std::string& value,
                             RelayFeedOptions* o) {
  std::string* fields[] = {&o->upstream,   &o->group,   &o->local_group, &o->node,
                           &o->token_file, &o->ca_file, &o->server_name};
  const char* names[] = {"upstream",   "group",   "local_group", "node",
                         "token_file", "ca_file", "server_name"};
  for (size_t i = 0; i < std::size(names); ++i) {
    if (key == names[i]) {
      *fields[i] = value;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown relay feed key \"", key,
                                                 "\" (known: upstream, group, local_group, node, "
                                                 "token_file, ca_file, server_name)"));
}

absl::StatusOr<RelayFeedOptions> ParseRelayFeedFlag(const std::string& text) {
  RelayFeedOptions o;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--relay-feed ", text, ": '", part, "' is not KEY=VALUE"));
    }
    if (absl::Status s =
            SetRelayFeedKey(std::string(part.substr(0, eq)), std::string(part.substr(eq + 1)), &o);
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--relay-feed ", text, ": ", s.message()));
    }
  }
  if (absl::Status s = ValidateRelayFeed(o); !s.ok()) return s;
  return o;
}

// One update of the local group as an in-process trainer runs it: its session, the update, and
// which of the session's slots are free (the update's SlotFree events). Shared by relayed updates
// and replays of the resident version.
class LocalUpdate final : public UpdateEvents {
 public:
  static absl::StatusOr<std::unique_ptr<LocalUpdate>> Open(DaemonCore* core, int device,
                                                           const std::string& group,
                                                           const std::string& version,
                                                           const std::string& client) {
    WSYNC_ASSIGN_OR_RETURN(SessionView session, core->OpenSession(device, client));
    std::unique_ptr<LocalUpdate> update(new LocalUpdate(core, session, version));
    absl::StatusOr<std::unique_ptr<UpdateMember>> member =
        core->BeginUpdate(session.id, group, version, update.get());
    if (!member.ok()) return member.status();  // the destructor closes the session
    update->member_ = *std::move(member);
    return update;
  }
  ~LocalUpdate() override {
    Abort(absl::AbortedError("the local update was dropped"));
    (void)core_->CloseSession(session_.id);
  }

  const std::string& version() const { return version_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  SlotMemory& slot(uint32_t index) { return *session_.slots[index]; }

  // A free slot, waited for up to `deadline`; the update's failure, or why it was interrupted,
  // if that comes first. Nothing is read of the session once its update failed: an update that
  // ended no longer keeps its session, whose slots may then be released.
  absl::StatusOr<uint32_t> TakeSlot(absl::Time deadline) {
    // The session lives while this update feeds it (a long update outlasts its lease).
    if (absl::Status alive = core_->KeepAlive(session_.id); !alive.ok()) return alive;
    std::unique_lock<std::mutex> lock(mu_);
    const auto ready = [&] { return !free_.empty() || !failed_.ok(); };
    while (!ready()) {
      if (cv_.wait_until(lock, absl::ToChronoTime(deadline)) == std::cv_status::timeout &&
          !ready()) {
        return absl::DeadlineExceededError("no slot came free within the bucket timeout");
      }
    }
    if (!failed_.ok()) return failed_;
    const uint32_t slot = *free_.begin();
    free_.erase(free_.begin());
    return slot;
  }
  // Submit, Commit and Abort may come from different threads (a stream's receive hands its
  // bucket on while the subscription aborts): the member is taken under member_mu_, and once
  // committed or aborted a late bucket is refused.
  absl::Status Submit(uint32_t slot, BucketManifest manifest, uint32_t checksum, uint64_t index,
                      bool last) {
    std::lock_guard<std::mutex> lock(member_mu_);
    if (member_ == nullptr) return absl::AbortedError("the local update already ended");
    return member_->SubmitBucket(slot, std::move(manifest), checksum, index, {}, last,
                                 ChecksumKind::kCrc32);
  }
  UpdateOutcome Commit() {
    std::unique_ptr<UpdateMember> member = TakeMember();
    if (member == nullptr) {
      UpdateOutcome ended;
      ended.status = absl::AbortedError("the local update already ended");
      return ended;
    }
    return member->Commit();
  }
  void Abort(const absl::Status& why) {
    std::unique_ptr<UpdateMember> member = TakeMember();
    if (member != nullptr) (void)member->Abort(why);
  }
  // Wakes a TakeSlot with `why` (wsyncd is stopping).
  void Interrupt(const absl::Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.ok()) failed_ = why;
    cv_.notify_all();
  }

  // UpdateEvents, from the local update's threads (none after Commit or Abort returned).
  void BucketDone(uint64_t, uint64_t, uint32_t, const BucketTiming&) override {}
  void SourcesRead(uint64_t) override {}
  void SlotFree(uint32_t slot) override {
    std::lock_guard<std::mutex> lock(mu_);
    free_.insert(slot);
    cv_.notify_all();
  }
  void Failed(const UpdateOutcome& outcome) override {
    Interrupt(outcome.status.ok() ? absl::AbortedError("the local update failed") : outcome.status);
    if (on_failed_) on_failed_();
  }
  // Called from the update's threads when it fails (a receive in progress must return: the
  // slot it lands in is no longer the update's). Set before the first bucket.
  void set_on_failed(std::function<void()> on_failed) { on_failed_ = std::move(on_failed); }

 private:
  LocalUpdate(DaemonCore* core, SessionView session, std::string version)
      : core_(core),
        session_(std::move(session)),
        version_(std::move(version)),
        slot_bytes_(session_.slots.empty() ? 0 : session_.slots[0]->bytes()) {
    for (uint32_t i = 0; i < session_.slots.size(); ++i) free_.insert(i);
  }

  DaemonCore* const core_;
  const SessionView session_;
  const std::string version_;
  const uint64_t slot_bytes_;
  std::unique_ptr<UpdateMember> TakeMember() {
    std::lock_guard<std::mutex> lock(member_mu_);
    return std::move(member_);
  }

  std::function<void()> on_failed_;
  std::mutex member_mu_;
  std::unique_ptr<UpdateMember> member_;  // guarded by member_mu_ once the update runs
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<uint32_t> free_;  // guarded by mu_
  absl::Status failed_;      // guarded by mu_
};

// The device a local group is fed from: one, or FAILED_PRECONDITION.
absl::StatusOr<int> LocalDeviceOf(const DaemonCore& core, const std::string& group) {
  WSYNC_ASSIGN_OR_RETURN(GroupSnapshot snapshot, core.GetGroup(group));
  WSYNC_ASSIGN_OR_RETURN(std::vector<TrainerFeed> feeds, FeedsOf(snapshot.spec, &core.platform()));
  if (feeds.size() != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("local group '", group, "' is fed from ", feeds.size(),
                     " GPUs; a relay feed lands on one (give the group engines on one GPU, or a "
                     "broadcast transport)"));
  }
  return feeds[0].device;
}

// One subscription: its stream, its pair with the upstream and the update it feeds.
class RelayFeeder::Subscription {
 public:
  Subscription(RelayFeeder* feeder)
      : feeder_(feeder), core_(feeder->core_), options_(feeder->options_) {}
  ~Subscription() {
    BreakPairs("the subscription ended");
    EndUpdate(absl::UnavailableError("the subscription ended"));
  }

  // Serves the stream until it ends; returns why. Every bucket received is handed on (or
  // refused) before it returns; `cancel` ends the stream first (a reply blocked in a write to an
  // upstream that stopped reading returns).
  absl::Status Serve(grpc::ClientReaderWriter<v1::RelayUp, v1::RelayDown>* stream,
                     const std::function<void()>& cancel);
  // From another thread (wsyncd is stopping): a receive or a slot wait in progress returns.
  void Interrupt(const absl::Status& why);

 private:
  // The reply to a request, or none yet: a bucket's comes once it was received and handed on.
  std::optional<v1::RelayReply> Handle(const v1::RelayRequest& request);
  absl::Status Join(const v1::RelayJoin& join);
  absl::Status Begin(const v1::RelayBegin& begin);
  // Checks the bucket's frame, takes a slot and gives its receive to the bucket's stream; a
  // refusal is answered at once.
  absl::Status Bucket(uint64_t request_id, const v1::RelayBucket& bucket);
  // The bucket's bytes landed (or did not): kept, submitted to the local update, answered.
  void HandOn(uint64_t request_id, const v1::RelayBucket& bucket, BucketManifest manifest,
              uint32_t slot, const std::shared_ptr<LocalUpdate>& update, uint64_t generation,
              absl::Status received);
  v1::RelayReply Commit();
  // The version last committed must not be served: the local group's engines pause until a
  // whole version, and the resident copy of it is dropped (a replay would serve it again).
  absl::Status Hold(const std::string& why);
  // Ends the open update, if any, without its commit.
  void EndUpdate(const absl::Status& why);
  // The pairs no longer match the upstream's broadcasts: dropped, so that the next update
  // forms new ones.
  void BreakPairs(absl::string_view why);
  // A bucket refused: the pairs are broken (the upstream's broadcast of it is on its way and
  // would land in the next receive) and the update ends, since a bucket it lacks is never
  // committed.
  absl::Status Refuse(absl::Status why);
  // False where the stream took no more (it ended).
  bool Reply(uint64_t request_id, v1::RelayReply reply);
  // Where bucket's delta frame lands (its stream's), after checking it is against `base` and fits
  // a slot; FAILED_PRECONDITION or INVALID_ARGUMENT naming both sides otherwise.
  absl::StatusOr<std::shared_ptr<SlotMemory>> DeltaFrameSlot(const v1::RelayBucket& bucket,
                                                             const ResidentBase* base,
                                                             uint64_t slot_bytes);
  // Tells the upstream that request `request_id` is still being worked on (RelayProgress).
  void SendProgress(uint64_t request_id);
  std::vector<std::shared_ptr<PeerCommunicator>> pairs() {
    std::lock_guard<std::mutex> lock(mu_);
    return pairs_;
  }
  bool HasAllPairs() {
    const std::vector<std::shared_ptr<PeerCommunicator>> all = pairs();
    return !all.empty() && std::find(all.begin(), all.end(), nullptr) == all.end();
  }

  RelayFeeder* const feeder_;
  DaemonCore* const core_;
  const RelayFeedOptions& options_;
  int pair_device_ = 0;
  // Guards pairs_, update_ and stream_ against the stream workers and Interrupt.
  std::mutex mu_;
  std::vector<std::shared_ptr<PeerCommunicator>> pairs_;  // one per stream; null: not joined
  std::shared_ptr<LocalUpdate> update_;
  // Which update a bucket belongs to: one more at every begin and every end, so that a receive
  // that lands after its update ended (a member the upstream dropped, an abort while buckets were
  // on their way) is answered and otherwise ignored, never kept or submitted to a later update.
  uint64_t generation_ = 0;  // guarded by mu_
  uint64_t next_index_ = 0;  // the bucket the open update takes next
  // The open update's deltas are against this (the resident version at its begin; null: none
  // is kept where the CPU reads it), held until the next begin so that the version staged
  // meanwhile does not free it. Guarded by mu_.
  std::shared_ptr<const ResidentBase> delta_base_;
  // Per stream, where a delta frame lands before it is applied (made at its first delta).
  std::vector<std::shared_ptr<SlotMemory>> delta_frames_;  // guarded by mu_
  std::mutex write_mu_;                                    // one writer at a time on the stream
  grpc::ClientReaderWriter<v1::RelayUp, v1::RelayDown>* stream_ = nullptr;  // while served
  // The streams' receives, made at the first join (again when the stream count changes).
  std::unique_ptr<OrderedReceiver> receiver_;
};

// The most streams a downstream joins: as many as an upstream's relay group may have.
constexpr uint32_t kMaxRelayStreams = 64;

absl::Status RelayFeeder::Subscription::Join(const v1::RelayJoin& join) {
  const uint32_t streams = std::max<uint32_t>(join.streams(), 1);
  if (streams > kMaxRelayStreams || join.stream() >= streams) {
    return absl::InvalidArgumentError(absl::StrCat("a join of stream ", join.stream(), " of ",
                                                   join.streams(), " (at most ", kMaxRelayStreams,
                                                   " streams)"));
  }
  // The upstream forms its pairs with no update open: a join ends any, and the pair it replaces
  // carries nothing more (a receive still on it returns now).
  EndUpdate(absl::AbortedError("the upstream formed its pairs again"));
  if (receiver_ == nullptr || receiver_->streams() != streams) {
    BreakPairs("the upstream formed pairs of another stream count");
    if (receiver_ != nullptr) receiver_->Drain();
    receiver_ = std::make_unique<OrderedReceiver>(streams);
    std::lock_guard<std::mutex> lock(mu_);
    pairs_.assign(streams, nullptr);
  } else {
    std::shared_ptr<PeerCommunicator> old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      old = std::move(pairs_[join.stream()]);
    }
    if (old != nullptr) old->Abort("the upstream formed a new pair");
    receiver_->Drain();
  }
  WSYNC_ASSIGN_OR_RETURN(int device, LocalDeviceOf(*core_, options_.local_group));
  absl::StatusOr<std::unique_ptr<PeerCommunicator>> joined =
      core_->mutable_platform()->JoinCommunicator(device, join.unique_id(), 1, 2, "",
                                                  absl::Now() + core_->options().bucket_timeout);
  if (!joined.ok()) return joined.status();
  std::shared_ptr<PeerCommunicator> pair = *std::move(joined);
  WSYNC_LOG(Info, "relay: joined the pair of group '", options_.group, "' from ", options_.upstream,
            " (stream ", join.stream() + 1, " of ", streams, ", ",
            SanitizePeerText(join.upstream_note(), 256), ") on device ", device, " (",
            pair->Describe(), ")");
  std::lock_guard<std::mutex> lock(mu_);
  pairs_[join.stream()] = std::move(pair);
  pair_device_ = device;
  return absl::OkStatus();
}

absl::Status RelayFeeder::Subscription::Begin(const v1::RelayBegin& begin) {
  // A begin while an update is open: the upstream gave that one up.
  EndUpdate(absl::AbortedError("the upstream began another update"));
  WSYNC_RETURN_IF_ERROR(CheckPeerLabel("the update's version", begin.version(), kMaxRelayText));
  if (!HasAllPairs()) {
    return absl::FailedPreconditionError("no pair with the upstream: the group must form again");
  }
  WSYNC_ASSIGN_OR_RETURN(int device, LocalDeviceOf(*core_, options_.local_group));
  if (device != pair_device_) {
    return absl::FailedPreconditionError(
        absl::StrCat("local group '", options_.local_group, "' is now fed from device ", device,
                     " but the pair is on device ", pair_device_, ": the group must form again"));
  }
  // A replay of the resident version in progress ends first (bounded: it is a local update).
  // Buckets of an update that ended may still be landing (their bytes were on the wire): they
  // are answered first (their update is gone, so nothing else happens to them), bounded by their
  // receives' deadlines, so that the new update's order starts clean.
  receiver_->Drain();
  WSYNC_RETURN_IF_ERROR(receiver_->Reset(0));
  WSYNC_RETURN_IF_ERROR(
      feeder_->AcquireUpdate(absl::Now() + absl::Seconds(20), /*preempt_replay=*/true));
  absl::StatusOr<std::unique_ptr<LocalUpdate>> update =
      LocalUpdate::Open(core_, device, options_.local_group, begin.version(),
                        absl::StrCat("relay from ", options_.upstream, " group ", options_.group));
  if (!update.ok()) {
    feeder_->ReleaseUpdate();
    return update.status();
  }
  std::shared_ptr<const ResidentBase> delta_base;
  if (ResidentVersion* resident = feeder_->ResidentFor(device)) {
    // Deltas are applied on the CPU so far: into slots in host memory only.
    if ((*update)->slot(0).kind() == MemoryKind::kHostShm) {
      delta_base = ResidentBase::Of(resident->Current());
    }
    resident->Begin(begin.version());
  }
  (*update)->set_on_failed([this] { BreakPairs("the local update failed"); });
  std::lock_guard<std::mutex> lock(mu_);
  delta_base_ = std::move(delta_base);
  update_ = *std::move(update);
  ++generation_;
  next_index_ = 0;
  return absl::OkStatus();
}

absl::Status RelayFeeder::Subscription::Refuse(absl::Status why) {
  BreakPairs(why.message());
  EndUpdate(why);
  return why;
}

absl::Status RelayFeeder::Subscription::Bucket(uint64_t request_id, const v1::RelayBucket& bucket) {
  std::shared_ptr<LocalUpdate> update;
  std::shared_ptr<PeerCommunicator> pair;
  std::shared_ptr<const ResidentBase> delta_base;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    update = update_;
    generation = generation_;
    delta_base = delta_base_;
    if (bucket.stream() < pairs_.size()) pair = pairs_[bucket.stream()];
  }
  if (update == nullptr) {
    return Refuse(absl::FailedPreconditionError("a bucket with no update open"));
  }
  if (pair == nullptr) {
    return Refuse(absl::FailedPreconditionError(
        absl::StrCat("a bucket on stream ", bucket.stream(), ", which has no pair (",
                     pairs().size(), " stream(s) joined)")));
  }
  if (bucket.index() != next_index_) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat(
        "relayed bucket ", bucket.index(), " came where bucket ", next_index_, " was due")));
  }
  absl::StatusOr<BucketManifest> manifest = ReadRelayBucket(bucket, update->slot_bytes());
  if (!manifest.ok()) return Refuse(manifest.status());
  // The slots bound the receives in flight: one per free slot, whichever streams they are on.
  absl::StatusOr<uint32_t> slot = update->TakeSlot(absl::Now() + core_->options().bucket_timeout);
  if (!slot.ok()) {
    return Refuse(absl::Status(slot.status().code(), absl::StrCat("bucket ", bucket.index(), ": ",
                                                                  slot.status().message())));
  }
  const uint64_t span = manifest->span_bytes();
  const absl::Time deadline = absl::Now() + core_->options().bucket_timeout;
  // A delta (docs/DELTA.md): its frame lands apart and is applied to the resident version it is
  // against, rebuilding the span in the slot; the local update then checks the upstream's CRC-32
  // of the span as for any bucket, so a wrong rebuild fails with DATA_LOSS.
  std::shared_ptr<SlotMemory> frame_slot;
  if (!bucket.delta_base().empty()) {
    absl::StatusOr<std::shared_ptr<SlotMemory>> landing =
        DeltaFrameSlot(bucket, delta_base.get(), update->slot_bytes());
    if (!landing.ok()) return Refuse(landing.status());
    frame_slot = *std::move(landing);
  }
  OrderedReceiver::Job job;
  job.index = bucket.index();
  job.stream = bucket.stream();
  job.receive = [pair, update, slot = *slot, span, deadline, frame_slot, delta_base,
                 frame_bytes = bucket.delta_bytes(), crc32 = bucket.checksum(),
                 manifest = *manifest]() -> absl::Status {
    if (frame_slot == nullptr) {
      return pair->ReceiveInto(update->slot(slot), {BroadcastPiece{0, span, DType::kUint8}},
                               deadline);
    }
    WSYNC_RETURN_IF_ERROR(
        pair->ReceiveInto(*frame_slot, {BroadcastPiece{0, frame_bytes, DType::kUint8}}, deadline));
    SlotMemory& out = update->slot(slot);
    return delta_base->Rebuild(
        manifest, absl::string_view(static_cast<const char*>(frame_slot->data()), frame_bytes),
        crc32, absl::MakeSpan(static_cast<uint8_t*>(out.data()), span));
  };
  job.hand_on = [this, request_id, bucket, manifest = *std::move(manifest), slot = *slot, update,
                 generation](absl::Status received) mutable {
    HandOn(request_id, bucket, std::move(manifest), slot, update, generation, std::move(received));
  };
  if (absl::Status added = receiver_->Add(std::move(job)); !added.ok()) return Refuse(added);
  ++next_index_;
  return absl::OkStatus();
}

void RelayFeeder::Subscription::HandOn(uint64_t request_id, const v1::RelayBucket& bucket,
                                       BucketManifest manifest, uint32_t slot,
                                       const std::shared_ptr<LocalUpdate>& update,
                                       uint64_t generation, absl::Status received) {
  int device = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    device = pair_device_;
  }
  // Its update ended while it landed, or while it was handed on: nothing of it goes anywhere, and
  // what ended the update dealt with the pairs already.
  const auto ended = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return generation != generation_;
  };
  const auto stale = [&] {
    return absl::AbortedError(
        absl::StrCat("bucket ", bucket.index(), " landed after its update ended"));
  };
  if (ended()) {
    Reply(request_id, ReplyOf(stale()));
    return;
  }
  absl::Status status = std::move(received);
  if (status.ok()) {
    // Kept before it is handed on (the slot is then the update's until it comes free again); a
    // version that cannot be kept is said once and the update goes on.
    if (ResidentVersion* resident = feeder_->ResidentFor(device)) {
      (void)resident->Keep(manifest, bucket.checksum(), bucket.last(), update->slot(slot));
    }
    status =
        update->Submit(slot, std::move(manifest), bucket.checksum(), bucket.index(), bucket.last());
  }
  if (!status.ok()) status = ended() ? stale() : Refuse(status);
  Reply(request_id, ReplyOf(status));
}

bool RelayFeeder::Subscription::Reply(uint64_t request_id, v1::RelayReply reply) {
  reply.set_id(request_id);
  v1::RelayUp up;
  *up.mutable_reply() = std::move(reply);
  std::lock_guard<std::mutex> lock(write_mu_);
  // A stream that ended takes no more: the upstream hears of it from the stream's end.
  return stream_ != nullptr && stream_->Write(up);
}

absl::StatusOr<std::shared_ptr<SlotMemory>> RelayFeeder::Subscription::DeltaFrameSlot(
    const v1::RelayBucket& bucket, const ResidentBase* base, uint64_t slot_bytes) {
  if (base == nullptr || base->version() != bucket.delta_base()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "bucket ", bucket.index(), " is a delta against version '",
        SanitizePeerText(bucket.delta_base(), kMaxRelayText), "', but this node's resident copy ",
        base == nullptr ? "holds none the CPU reads"
                        : absl::StrCat("holds version '", base->version(), "'")));
  }
  if (bucket.delta_bytes() == 0 || bucket.delta_bytes() > slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("bucket ", bucket.index(), "'s delta is ",
                                                   bucket.delta_bytes(),
                                                   " bytes; a slot here holds ", slot_bytes));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (delta_frames_.size() <= bucket.stream()) delta_frames_.resize(bucket.stream() + 1);
  std::shared_ptr<SlotMemory>& landing = delta_frames_[bucket.stream()];
  if (landing == nullptr || landing->bytes() < slot_bytes) {
    WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<SlotMemory> made,
                           core_->mutable_platform()->AllocateSlot(pair_device_, slot_bytes));
    landing = std::move(made);
  }
  return landing;
}

void RelayFeeder::Subscription::SendProgress(uint64_t request_id) {
  v1::RelayUp up;
  up.mutable_progress()->set_id(request_id);
  std::lock_guard<std::mutex> lock(write_mu_);
  if (stream_ != nullptr) (void)stream_->Write(up);
}

v1::RelayReply RelayFeeder::Subscription::Commit() {
  // The upstream commits once every bucket was answered, so every receive was handed on; the
  // wait covers a hand-on still finishing after its answer was written.
  if (receiver_ != nullptr) receiver_->Drain();
  std::shared_ptr<LocalUpdate> update;
  {
    std::lock_guard<std::mutex> lock(mu_);
    update = std::move(update_);
    // Every delta was applied: the previous version need not be held beside the new one.
    delta_base_.reset();
  }
  if (update == nullptr) {
    return ReplyOf(absl::FailedPreconditionError("a commit with no update open"));
  }
  UpdateOutcome outcome = update->Commit();
  const std::string version = update->version();
  update.reset();
  if (ResidentVersion* resident = feeder_->ResidentFor(pair_device_)) {
    if (outcome.status.ok()) {
      resident->Commit();
    } else {
      resident->Abort();
    }
  }
  feeder_->ReleaseUpdate();
  v1::RelayReply reply = ReplyOf(outcome.status);
  for (const EngineOutcome& e : outcome.engines) EngineOutcomeToProto(e, reply.add_engines());
  feeder_->NoteCommit(version, outcome.status);
  return reply;
}

absl::Status RelayFeeder::Subscription::Hold(const std::string& why) {
  const std::string reason = absl::StrCat("held by the upstream ", options_.upstream, ": ", why);
  // A replay of the resident version (the version held) stops first, and none starts while the
  // engines are being held.
  WSYNC_RETURN_IF_ERROR(
      feeder_->AcquireUpdate(absl::Now() + absl::Seconds(20), /*preempt_replay=*/true));
  absl::Cleanup release = [this] { feeder_->ReleaseUpdate(); };
  int device = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    device = pair_device_;
  }
  if (ResidentVersion* resident = feeder_->ResidentFor(device)) resident->Withdraw(reason);
  return core_->HoldEngines(options_.local_group, reason);
}

void RelayFeeder::Subscription::EndUpdate(const absl::Status& why) {
  std::shared_ptr<LocalUpdate> update;
  int device = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    update = std::move(update_);
    ++generation_;
    device = pair_device_;
    delta_base_.reset();  // a job still landing holds its own
  }
  if (update == nullptr) return;
  // A wait for a free slot of it returns now (the serving thread may be in one).
  update->Interrupt(why);
  WSYNC_LOG(Warning, "relay: the update of '", options_.local_group, "' to version '",
            update->version(), "' is aborted: ", why.message());
  update->Abort(why);
  update.reset();
  if (ResidentVersion* resident = feeder_->ResidentFor(device)) resident->Abort();
  feeder_->ReleaseUpdate();
}

void RelayFeeder::Subscription::BreakPairs(absl::string_view why) {
  std::vector<std::shared_ptr<PeerCommunicator>> pairs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pairs.swap(pairs_);
    pairs_.assign(pairs.size(), nullptr);
  }
  for (const auto& pair : pairs) {
    if (pair != nullptr) pair->Abort(why);
  }
}

void RelayFeeder::Subscription::Interrupt(const absl::Status& why) {
  std::vector<std::shared_ptr<PeerCommunicator>> pairs;
  std::shared_ptr<LocalUpdate> update;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pairs = pairs_;
    update = update_;
  }
  for (const auto& pair : pairs) {
    if (pair != nullptr) pair->Abort(why.message());
  }
  if (update != nullptr) update->Interrupt(why);
}

std::optional<v1::RelayReply> RelayFeeder::Subscription::Handle(const v1::RelayRequest& request) {
  switch (request.kind_case()) {
    case v1::RelayRequest::kJoin:
      return ReplyOf(Join(request.join()));
    case v1::RelayRequest::kBegin: {
      v1::RelayReply reply = ReplyOf(Begin(request.begin()));
      if (reply.code() == 0) {
        std::lock_guard<std::mutex> lock(mu_);
        if (delta_base_ != nullptr) reply.set_resident_version(delta_base_->version());
      }
      // Broken here (a refused bucket, a failed local update) where the upstream may not have
      // heard: it forms the group again before its next update.
      if (reply.code() != 0 && !HasAllPairs()) reply.set_pairs_lost(true);
      return reply;
    }
    case v1::RelayRequest::kBucket:
      if (absl::Status s = Bucket(request.id(), request.bucket()); !s.ok()) return ReplyOf(s);
      return std::nullopt;
    case v1::RelayRequest::kCommit: {
      // While the local commit runs, progress at the interval the upstream asked for (at least
      // 10 ms apart): it drops a member that says nothing for a bucket deadline. Only for as
      // long as the local commit may take by its own bounds (each bucket its slots still hold
      // loaded within the bucket deadline, then the engines' commit and resume): a commit stuck
      // past that goes silent, so the upstream stops waiting for it.
      std::optional<Ticker> progress;
      if (const uint32_t every_ms = request.commit().progress_interval_ms(); every_ms > 0) {
        const DaemonOptions& o = core_->options();
        const absl::Time stop_at = absl::Now() + o.bucket_timeout * (o.slots_per_device + 1) +
                                   o.group.timeouts.control * 2;
        progress.emplace(absl::Milliseconds(std::max<uint32_t>(every_ms, 10)),
                         [this, id = request.id(), stop_at] {
                           if (absl::Now() < stop_at) SendProgress(id);
                         });
      }
      return Commit();
    }
    case v1::RelayRequest::kAbort:
      EndUpdate(absl::AbortedError(absl::StrCat("the upstream aborted it: ",
                                                SanitizePeerText(request.abort().reason(), 512))));
      return ReplyOf(absl::OkStatus());
    case v1::RelayRequest::kHold:
      return ReplyOf(Hold(SanitizePeerText(request.hold().reason(), 512)));
    default:
      return ReplyOf(absl::InvalidArgumentError("a relay request of no kind this wsyncd knows"));
  }
}

absl::Status RelayFeeder::Subscription::Serve(
    grpc::ClientReaderWriter<v1::RelayUp, v1::RelayDown>* stream,
    const std::function<void()>& cancel) {
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    stream_ = stream;
  }
  // Before the stream goes: the receives in flight return (their pairs aborted), every bucket
  // is handed on, and nothing writes to the stream after.
  absl::Cleanup detach = [&] {
    cancel();
    BreakPairs("the subscription's stream ended");
    if (receiver_ != nullptr) receiver_->Drain();
    std::lock_guard<std::mutex> lock(write_mu_);
    stream_ = nullptr;
  };
  v1::RelayDown down;
  while (stream->Read(&down)) {
    if (!down.has_request()) {
      return absl::InvalidArgumentError("the upstream sent something other than a request");
    }
    if (std::optional<v1::RelayReply> reply = Handle(down.request())) {
      const bool committed = down.request().has_commit() && reply->code() == 0;
      // A commit whose answer cannot reach the upstream (it dropped this node meanwhile): the
      // group may not have taken the version, so the engines must not serve it.
      if (!Reply(down.request().id(), *std::move(reply)) && committed) {
        (void)Hold("the upstream dropped this node before its commit was answered");
      }
    }
  }
  return absl::UnavailableError("the subscription's stream ended");
}

RelayFeeder::RelayFeeder(DaemonCore* core, RelayFeedOptions options, ResidentOptions resident)
    : core_(core),
      options_([&] {
        if (options.local_group.empty()) options.local_group = options.group;
        if (options.node.empty()) options.node = HostName();
        return std::move(options);
      }()),
      resident_options_(resident) {
  view_.options = options_;
}

RelayFeeder::~RelayFeeder() { Stop(); }

void RelayFeeder::Start() {
  thread_ = std::thread([this] { Run(); });
  if (resident_options_.medium.has_value()) replay_thread_ = std::thread([this] { ReplayLoop(); });
}

void RelayFeeder::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
    // A receive or a slot wait in progress returns now, not at its deadline.
    if (subscription_ != nullptr) {
      subscription_->Interrupt(absl::CancelledError("wsyncd is stopping"));
    }
    if (replay_update_ != nullptr)
      replay_update_->Interrupt(absl::CancelledError("wsyncd is stopping"));
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (replay_thread_.joinable()) replay_thread_.join();
}

RelayFeeder::View RelayFeeder::Status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_;
}

std::optional<ResidentVersion::View> RelayFeeder::ResidentStatus() const {
  if (!resident_options_.medium.has_value()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  if (resident_ == nullptr) {
    ResidentVersion::View none;
    none.medium = *resident_options_.medium;
    none.cap_bytes = resident_options_.cap_bytes;
    return none;
  }
  return resident_->Status();
}

absl::Status RelayFeeder::AcquireUpdate(absl::Time deadline, bool preempt_replay) {
  std::unique_lock<std::mutex> lock(mu_);
  while (update_held_ && !stopping_) {
    // A relayed update is newer than the resident version a replay brings: the replay stops
    // at its next bucket.
    if (preempt_replay && replay_update_ != nullptr) {
      replay_update_->Interrupt(absl::AbortedError("a relayed update begins"));
    }
    if (cv_.wait_until(lock, absl::ToChronoTime(deadline)) == std::cv_status::timeout &&
        update_held_) {
      return absl::UnavailableError(
          absl::StrCat("local group '", options_.local_group,
                       "' is being brought to the resident version and did not finish in time"));
    }
  }
  if (stopping_) return absl::CancelledError("wsyncd is stopping");
  update_held_ = true;
  return absl::OkStatus();
}

void RelayFeeder::ReleaseUpdate() {
  std::lock_guard<std::mutex> lock(mu_);
  update_held_ = false;
  cv_.notify_all();
}

ResidentVersion* RelayFeeder::ResidentFor(int device) {
  if (!resident_options_.medium.has_value()) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (resident_ == nullptr || resident_device_ != device) {
    resident_ = std::make_unique<ResidentVersion>(
        core_->mutable_platform(), device, *resident_options_.medium, resident_options_.cap_bytes);
    resident_device_ = device;
  }
  return resident_.get();
}

void RelayFeeder::NoteCommit(const std::string& version, const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (status.ok()) {
    view_.last_version = version;
    view_.last_commit = absl::Now();
    view_.last_error.clear();
    ++view_.updates_committed;
  } else {
    view_.last_error = std::string(status.message());
  }
}

void RelayFeeder::ReplayLoop() {
  for (;;) {
    std::shared_ptr<const ResidentVersion::Kept> kept;
    int device = -1;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_; });
      if (stopping_) return;
      if (update_held_ || resident_ == nullptr) continue;
      kept = resident_->Current();
      device = resident_device_;
      if (kept == nullptr) continue;
      // A version replayed before waits, doubling from a minute to an hour: an engine that
      // cannot take it (or does not report it) is not fed it in a loop.
      if (replayed_version_ == kept->version && absl::Now() < replay_again_at_) continue;
    }
    // Only where this feed's versions are the group's: a group another trainer updated since is
    // that trainer's, and a new group (no version yet) is brought in.
    absl::StatusOr<GroupSnapshot> group = core_->GetGroup(options_.local_group);
    if (!group.ok() || group->state == GroupState::kUpdating) continue;
    if (!group->last_version.empty() && group->last_version != kept->version) continue;
    absl::StatusOr<std::vector<EngineRow>> rows = core_->ListEngines(options_.local_group);
    if (!rows.ok()) continue;
    // Healthy engines that hold another version (they restarted) or wait for a whole one. An
    // engine that reports no version says nothing either way.
    std::vector<std::string> behind;
    for (const EngineRow& row : *rows) {
      if (!row.health.healthy) continue;
      const std::string& holds = row.health.weight_version;
      if ((!holds.empty() && holds != kept->version) || !row.needs_full_version.empty()) {
        behind.push_back(row.endpoint.url);
      }
    }
    if (behind.empty()) continue;
    if (!AcquireUpdate(absl::Now(), /*preempt_replay=*/false).ok()) continue;
    bool still_current;
    {
      // A relayed update may have committed a newer version meanwhile: never go back to an
      // older one.
      std::lock_guard<std::mutex> lock(mu_);
      still_current = resident_ != nullptr && resident_->Current() == kept;
    }
    if (!still_current) {
      ReleaseUpdate();
      continue;
    }
    WSYNC_LOG(Info, "resident: bringing local group '", options_.local_group, "' to version '",
              kept->version, "' (", absl::StrJoin(behind, ", "), " held another)");
    const absl::Time start = absl::Now();
    absl::Status replayed = Replay(*kept, device);
    ReleaseUpdate();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (replayed_version_ == kept->version) {
        replay_backoff_ = std::min(replay_backoff_ * 2, absl::Hours(1));
      } else {
        replay_backoff_ = absl::Minutes(1);
      }
      replayed_version_ = kept->version;
      replay_again_at_ = absl::Now() + replay_backoff_;
      if (!replayed.ok()) view_.last_error = std::string(replayed.message());
    }
    if (replayed.ok()) {
      WSYNC_LOG(Info, "resident: local group '", options_.local_group, "' holds version '",
                kept->version, "' again: ", kept->buckets.size(), " buckets, ", kept->bytes,
                " bytes in ", absl::FormatDuration(absl::Now() - start), ", no trainer involved");
    } else {
      WSYNC_LOG(Warning, "resident: bringing local group '", options_.local_group, "' to version '",
                kept->version, "' failed: ", replayed.message());
    }
  }
}

absl::Status RelayFeeder::Replay(const ResidentVersion::Kept& kept, int device) {
  WSYNC_ASSIGN_OR_RETURN(int now_device, LocalDeviceOf(*core_, options_.local_group));
  if (now_device != device) {
    return absl::FailedPreconditionError(absl::StrCat("the resident version is on device ", device,
                                                      ", the local group is fed from ",
                                                      now_device));
  }
  WSYNC_ASSIGN_OR_RETURN(
      std::unique_ptr<LocalUpdate> opened,
      LocalUpdate::Open(core_, device, options_.local_group, kept.version,
                        absl::StrCat("resident version of relay group ", options_.group)));
  std::shared_ptr<LocalUpdate> update = std::move(opened);
  {
    // A relayed update that begins, or wsyncd stopping, interrupts it (a newer version wins).
    std::lock_guard<std::mutex> lock(mu_);
    replay_update_ = update;
  }
  absl::Cleanup unregister = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    replay_update_.reset();
  };
  for (size_t i = 0; i < kept.buckets.size(); ++i) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return absl::CancelledError("wsyncd is stopping");
    }
    const ResidentVersion::Bucket& bucket = kept.buckets[i];
    WSYNC_ASSIGN_OR_RETURN(uint32_t slot,
                           update->TakeSlot(absl::Now() + core_->options().bucket_timeout));
    WSYNC_RETURN_IF_ERROR(bucket.memory->CopyToSlot(update->slot(slot)));
    // The local update checks the bytes against the trainer's CRC-32 once more.
    WSYNC_RETURN_IF_ERROR(update->Submit(slot, bucket.manifest, bucket.checksum, i, bucket.last));
  }
  UpdateOutcome outcome = update->Commit();
  return outcome.status;
}

void RelayFeeder::Run() {
  const std::string where = absl::StrCat("group '", options_.group, "' of ", options_.upstream,
                                         " into local group '", options_.local_group, "'");
  for (;;) {
    absl::Status ended;
    {
      auto token = ReadSecretFile(options_.token_file, "relay token file");
      auto ca = ReadSecretFile(options_.ca_file, "relay CA file");
      if (!token.ok() || !ca.ok()) {
        ended = token.ok() ? ca.status() : token.status();
      } else {
        grpc::SslCredentialsOptions ssl;
        ssl.pem_root_certs = *ca;
        grpc::ChannelArguments args;
        if (!options_.server_name.empty()) args.SetSslTargetNameOverride(options_.server_name);
        // Each attempt connects afresh: gRPC's shared subchannels would carry the backoff of the
        // failed attempts over (up to minutes), so an upstream back on its port would wait.
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
        args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 500);
        args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
        // An upstream that vanished without a word (its host gone, a partition) is noticed
        // within a minute, and the feed subscribes again (the server allows pings this often).
        args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
        args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
        args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
        auto channel = grpc::CreateCustomChannel(
            options_.upstream,
            grpc::CompositeChannelCredentials(grpc::SslCredentials(ssl),
                                              grpc::AccessTokenCredentials(*token)),
            args);
        auto stub = v1::Relay::NewStub(channel);
        grpc::ClientContext context;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stopping_) return;
          context_ = &context;
        }
        auto stream = stub->Subscribe(&context);
        v1::RelayUp up;
        v1::RelaySubscribe* want = up.mutable_subscribe();
        want->set_protocol_version(kRelayProtocolVersion);
        want->set_platform(std::string(core_->platform().name()));
        want->set_nccl_version(core_->platform().DefaultNcclVersion());
        want->set_node(options_.node);
        want->add_groups(options_.group);
        want->set_slot_bytes(core_->options().slot_bytes);
        absl::StatusOr<GroupSnapshot> local = core_->GetGroup(options_.local_group);
        if (local.ok()) {
          want->mutable_bucket_rules()->set_one_dtype(local->bucket_rules.one_dtype);
          want->mutable_bucket_rules()->set_close_after_bytes(
              local->bucket_rules.close_after_bytes);
        }
        v1::RelayDown admitted;
        if (!local.ok()) {
          ended = local.status();
          context.TryCancel();
        } else if (SubscribeWithin(stream.get(), &context, up, &admitted, absl::Seconds(30))) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            view_.subscribed = true;
            view_.subscriber_id = SanitizePeerText(admitted.admitted().subscriber_id(), 64);
          }
          WSYNC_LOG(Info, "relay: subscribed to ", where, " as ", options_.node, " (",
                    SanitizePeerText(admitted.admitted().subscriber_id(), 64), ")");
          Subscription subscription(this);
          {
            std::lock_guard<std::mutex> lock(mu_);
            subscription_ = &subscription;
          }
          ended = subscription.Serve(stream.get(), [&context] { context.TryCancel(); });
          context.TryCancel();
          std::lock_guard<std::mutex> lock(mu_);
          subscription_ = nullptr;
        }
        grpc::Status finished = stream->Finish();
        if (!finished.ok()) {
          ended = absl::UnavailableError(
              absl::StrCat("the upstream ended the subscription: ",
                           SanitizePeerText(finished.error_message(), 1024)));
        }
        std::lock_guard<std::mutex> lock(mu_);
        context_ = nullptr;
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    view_.subscribed = false;
    view_.last_error = std::string(ended.message());
    if (stopping_) return;
    WSYNC_LOG(Warning, "relay: the subscription to ", where, " ended: ", ended.message(),
              "; subscribing again in ", absl::FormatDuration(options_.retry));
    cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.retry), [&] { return stopping_; });
    if (stopping_) return;
  }
}

void RelayFeeders::Start(DaemonCore* core, const std::vector<RelayFeedOptions>& feeds,
                         const ResidentOptions& resident) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const RelayFeedOptions& feed : feeds) {
    feeders_.push_back(std::make_unique<RelayFeeder>(core, feed, resident));
    feeders_.back()->Start();
  }
}

void RelayFeeders::Stop() {
  std::vector<std::unique_ptr<RelayFeeder>> feeders;
  {
    std::lock_guard<std::mutex> lock(mu_);
    feeders.swap(feeders_);
  }
  for (auto& f : feeders) f->Stop();
}

std::vector<RelayFeeder::View> RelayFeeders::Views() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RelayFeeder::View> out;
  for (const auto& f : feeders_) out.push_back(f->Status());
  return out;
}

std::vector<std::pair<RelayFeedOptions, ResidentVersion::View>> RelayFeeders::Residents() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<RelayFeedOptions, ResidentVersion::View>> out;
  for (const auto& f : feeders_) {
    if (std::optional<ResidentVersion::View> v = f->ResidentStatus()) {
      out.emplace_back(f->Status().options, *v);
    }
  }
  return out;
}

}  // namespace wsync
