#include "daemon/core/update_run.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"
#include "daemon/core/read_in_place.h"
#include "daemon/core/trainer_feeds.h"

namespace wsync {

UpdateRun::UpdateRun(UpdateContext context, std::shared_ptr<WeightGroup> group, BufferPool* pool,
                     size_t first, const std::string& session_id, UpdateEvents* events,
                     DoneCallback on_done)
    : context_(std::move(context)),
      group_(std::move(group)),
      feeds_(group_->feeds()),
      streams_(FeedsAreStreams(group_->spec())),
      pool_(pool),
      on_done_(std::move(on_done)),
      started_(absl::Now()),
      feed_state_(feeds_.size()) {
  last_progress_ = started_;
  feed_state_.at(first).session_id = session_id;
  feed_state_[first].events = events;
  sender_ = std::thread([this] { SenderLoop(); });
  reuse_thread_ = std::thread([this] { ReuseLoop(); });
  answer_thread_ = std::thread([this] { AnswerLoop(); });
  idle_thread_ = std::thread([this] { IdleLoop(); });
}

UpdateRun::~UpdateRun() {
  bool finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished = finished_ || finishing_;
  }
  if (!finished) Abort(absl::AbortedError("update dropped without commit or abort"));
  if (sender_.joinable()) sender_.join();
  if (reuse_thread_.joinable()) reuse_thread_.join();
  if (answer_thread_.joinable()) answer_thread_.join();
  if (idle_thread_.joinable()) idle_thread_.join();
}

bool UpdateRun::TrainersTurnLocked() const {
  // Buckets in flight are bounded by their own deadlines, a bucket that lacks a feed's share by
  // its deadline, and a commit waiting for the other feeds by its own.
  if (transfers_started_ != transfers_settled_) return false;
  if (!queue_.empty() && queue_.front().present == queue_.front().needed) return false;
  for (const Feed& f : feed_state_) {
    if (f.committed) return false;
  }
  return true;
}

void UpdateRun::IdleLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!finishing_ && !finished_) {
    const absl::Time deadline = last_progress_ + context_.bucket_timeout;
    if (absl::Now() >= deadline && TrainersTurnLocked()) break;
    // Woken by every change of the run; the deadline moves with each sign of progress.
    cv_.wait_until(lock, absl::ToChronoTime(std::max(deadline, absl::Now() + absl::Seconds(1))));
  }
  if (finishing_ || finished_) return;
  std::vector<std::string> feeds;
  for (size_t i = 0; i < feed_state_.size(); ++i) feeds.push_back(FeedProgress(i));
  absl::Status idle = absl::DeadlineExceededError(absl::StrCat(
      "update ", context_.update_id, " of version '", context_.version, "': the trainer sent ",
      buckets_ == 0 && taken_ == 0 ? "no bucket" : "nothing more", " for ",
      absl::FormatDuration(context_.bucket_timeout), " (", absl::StrJoin(feeds, "; "),
      "); aborted so that its engines do not stay paused (wsyncd --bucket-timeout bounds it)"));
  lock.unlock();
  WSYNC_LOG(Warning, idle.message());
  Finish(false, std::move(idle), /*tell_every_feed=*/true);
}

uint32_t UpdateRun::world_size() const { return group_->Snapshot().world_size; }

bool UpdateRun::pull_preferred() const { return group_->pull_preferred(); }

bool UpdateRun::sources_mapped_per_update() const {
  return group_->transport_kind().engines_read_in_place();
}

void UpdateRun::Fail(absl::Status status) {
  if (!failure_.ok()) return;
  // The failure goes to the trainer, the log, the history and the reasons engines wait for a
  // full version: whoever wrote it (an engine's answer, a trainer's abort), it is bounded and
  // printable.
  failure_ = absl::Status(status.code(), SanitizePeerText(status.message(), kMaxFailureBytes));
}

template <typename Fn>
void UpdateRun::ForEachJoined(Fn fn) {
  for (Feed& f : feed_state_) {
    if (UpdateEvents* events = f.events.load()) fn(events);
  }
}

bool UpdateRun::accepting() {
  std::lock_guard<std::mutex> lock(mu_);
  return !finished_ && !finishing_ && !closing_;
}

bool UpdateRun::running() {
  std::lock_guard<std::mutex> lock(mu_);
  return !finished_;
}

absl::Status UpdateRun::Join(size_t feed, const std::string& session_id, UpdateEvents* events) {
  std::lock_guard<std::mutex> lock(mu_);
  if (feed >= feed_state_.size()) return absl::InternalError("no such feed");
  if (finished_ || finishing_ || closing_) {
    return absl::FailedPreconditionError(absl::StrCat("update ", context_.update_id,
                                                      " of version '", context_.version,
                                                      "' has ended; begin a new one"));
  }
  if (!failure_.ok()) return failure_;
  Feed& f = feed_state_[feed];
  if (!f.session_id.empty()) {
    return absl::AlreadyExistsError(
        absl::StrCat("session ", f.session_id, " already feeds ", FeedName(feeds_[feed]),
                     " in update ", context_.update_id, " of version '", context_.version, "'"));
  }
  f.session_id = session_id;
  f.events = events;
  last_progress_ = absl::Now();
  cv_.notify_all();
  return absl::OkStatus();
}

absl::Status UpdateRun::SubmitBucket(size_t feed, uint32_t slot, BucketManifest manifest,
                                     uint32_t checksum, uint64_t sequence, PulledSources pulled,
                                     bool last, ChecksumKind checksum_kind) {
  std::unique_lock<std::mutex> lock(mu_);
  if (finished_ || finishing_ || closing_) {
    return absl::FailedPreconditionError(
        absl::StrCat("bucket ", sequence, " arrived after the update was committed or aborted"));
  }
  if (!failure_.ok()) return failure_;
  Feed& f = feed_state_.at(feed);
  const std::string& session = f.session_id;
  // Names are kept (names_), quoted in refusals and logged: bounded and printable before anything
  // else reads them.
  for (size_t i = 0; i < manifest.tensors.size(); ++i) {
    absl::Status name = CheckPeerLabel(absl::StrCat("the name of tensor ", i),
                                       manifest.tensors[i].name, kMaxTensorNameBytes);
    if (!name.ok()) {
      Fail(absl::Status(
          name.code(),
          absl::StrCat("bucket ", sequence, " refused: ", name.message(), " (",
                       SanitizePeerText(manifest.tensors[i].name, kQuotedNameBytes), ")")));
      cv_.notify_all();
      return failure_;
    }
  }
  const int device = feeds_[feed].device;
  const auto refuse = [&](const absl::Status& s, absl::string_view what) {
    Fail(absl::Status(s.code(), absl::StrCat("bucket ", sequence, what, s.message())));
    cv_.notify_all();
    return failure_;
  };
  if (streams_ && f.said_last) {
    // The engines may have been told the update's last bucket already (its label and flush).
    return refuse(
        absl::InvalidArgumentError(absl::StrCat(FeedName(feeds_[feed]),
                                                " marked an earlier bucket its last; nothing of "
                                                "this one was sent")),
        " refused: ");
  }
  if (pulled.pieces.empty() && context_.checksum == ChecksumKind::kCrc32 &&
      checksum_kind != ChecksumKind::kCrc32) {
    // A sampled check cannot stand for the full one the update asked for (bytes that then cross
    // a wire, or an operator's --checksum crc32).
    return refuse(absl::InvalidArgumentError(absl::StrCat(
                      "carries a ", ChecksumKindName(checksum_kind),
                      " checksum, but this update asks every bucket for crc32 (UpdateStarted."
                      "checksum); nothing was sent")),
                  " refused: ");
  }
  auto memory = pool_->Get(device, slot, session);
  if (!memory.ok()) return refuse(memory.status(), ": ");
  // The update's bucket this one is a share of; the first share of it made it and was checked
  // in full, the others must match it.
  // Streams: every bucket is one feed's own.
  const uint64_t index = f.submitted;
  Pending* joined = !streams_ && index - taken_ < queue_.size() ? &queue_[index - taken_] : nullptr;
  // A bucket past the slot's size never enters it: pull mode may send one only where the engines
  // read it in place, from one trainer allocation laid out as the bucket (whose mapping bounds
  // the pieces already).
  uint64_t capacity = (*memory)->bytes();
  if (manifest.span_bytes() > capacity && DirectSource(pulled, manifest) != nullptr) {
    capacity = manifest.span_bytes();
  }
  absl::Status valid = ValidateManifest(manifest, capacity);
  if (!valid.ok() && manifest.span_bytes() > (*memory)->bytes()) {
    valid = absl::InvalidArgumentError(
        absl::StrCat(valid.message(), " (it spans ", manifest.span_bytes(),
                     " bytes and is not read in place: only a pull-mode bucket laid out in one "
                     "trainer allocation exactly as sent may exceed a slot)"));
  }
  if (valid.ok() && joined != nullptr) {
    if (!(manifest == joined->manifest) || last != joined->last) {
      valid = absl::InvalidArgumentError(absl::StrCat(
          "it differs from bucket ", index, " of the other trainer ranks (", FeedName(feeds_[feed]),
          " sent ", manifest.tensors.size(), " tensor(s) starting with '",
          manifest.tensors.empty() ? "" : manifest.tensors.front().name, "'", last ? ", last" : "",
          "; they sent ", joined->manifest.tensors.size(), " starting with '",
          joined->manifest.tensors.empty() ? "" : joined->manifest.tensors.front().name, "'",
          joined->last ? ", last" : "", "): every rank of a TP group sends the same bucket plan"));
    }
  } else if (valid.ok()) {
    valid = group_->ValidateBucket(manifest);
    if (valid.ok()) {
      for (const TensorEntry& t : manifest.tensors) {
        if (names_.count(t.name) != 0) {
          valid = absl::InvalidArgumentError(
              absl::StrCat("duplicate tensor name '", t.name, "': already sent in this update"));
          break;
        }
      }
    }
  }
  if (!valid.ok()) return refuse(valid, " refused: ");
  absl::Status moved =
      pool_->Transition(device, slot, session, SlotState::kFilling, SlotState::kQueued);
  if (!moved.ok()) return refuse(moved, ": ");
  WSYNC_LOG(Debug, "update ", context_.update_id, " bucket ", sequence, " of ",
            FeedName(feeds_[feed]), " (slot ", slot, ", ", manifest.span_bytes(), " bytes",
            pulled.pieces.empty() ? "" : ", pull", "): received");
  if (joined == nullptr) {
    for (const TensorEntry& t : manifest.tensors) names_.insert(t.name);
    Pending& p = queue_.emplace_back();
    p.manifest = std::move(manifest);
    p.last = last;
    if (streams_) {
      // The update's last bucket is the last feed's last: the others said theirs before.
      f.said_last = f.said_last || last;
      p.last = last && std::all_of(feed_state_.begin(), feed_state_.end(),
                                   [](const Feed& other) { return other.said_last; });
    }
    p.needed = streams_ ? 1 : feeds_.size();
    p.shares.resize(feeds_.size());
    p.deadline = absl::Now() + context_.bucket_timeout;
    joined = &p;
  }
  Share& share = joined->shares[feed];
  share.present = true;
  share.slot = slot;
  share.memory = *memory;
  share.checksum = checksum;
  share.checksum_kind = checksum_kind;
  share.sequence = sequence;
  share.pulled = std::move(pulled);
  ++joined->present;
  ++f.submitted;
  last_progress_ = absl::Now();
  cv_.notify_all();
  return absl::OkStatus();
}

void UpdateRun::ReleaseSlot(size_t feed, uint32_t slot, SlotState from) {
  (void)pool_->Transition(feeds_[feed].device, slot, feed_state_[feed].session_id, from,
                          SlotState::kFilling);
}

void UpdateRun::ReleaseShares(const Pending& p, SlotState from) {
  for (size_t i = 0; i < p.shares.size(); ++i) {
    if (p.shares[i].present) ReleaseSlot(i, p.shares[i].slot, from);
  }
}

std::string UpdateRun::FeedProgress(size_t feed) const {
  const Feed& f = feed_state_[feed];
  return absl::StrCat(
      "the trainer rank feeding ", FeedName(feeds_[feed]),
      f.session_id.empty()
          ? " never joined the update (no session began it with this group and version)"
          : absl::StrCat(" (session ", f.session_id, ") sent ", f.submitted, " bucket(s)"));
}

std::string UpdateRun::MissingShares(uint64_t index, const Pending& p) const {
  std::vector<std::string> missing;
  for (size_t i = 0; i < p.shares.size(); ++i) {
    if (!p.shares[i].present) missing.push_back(FeedProgress(i));
  }
  return absl::StrCat("bucket ", index, " of update ", context_.update_id,
                      " is incomplete: ", absl::StrJoin(missing, "; "));
}

void UpdateRun::ReportFailure(absl::Status status) {
  UpdateOutcome early;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Fail(std::move(status));
    cv_.notify_all();
    if (failure_reported_) return;
    failure_reported_ = true;
    early.update_id = context_.update_id;
    early.status = failure_;
    early.engines = bucket_outcomes_;
    early.buckets = buckets_;
    early.bytes = bytes_;
  }
  early.seconds = absl::ToDoubleSeconds(absl::Now() - started_);
  // No bucket starts after a failure, so the engines reached so far are those that will wait,
  // paused, for a full version once the update ends.
  for (const std::string& url : group_->ReachedEngines()) {
    auto it = std::find_if(early.engines.begin(), early.engines.end(),
                           [&](const EngineOutcome& o) { return o.engine == url; });
    if (it == early.engines.end()) {
      it = early.engines.insert(early.engines.end(),
                                EngineOutcome{url, absl::AbortedError("the update failed")});
    }
    it->needs_full_version = absl::StrCat(
        "version '", context_.version,
        "' reached it and failed: it may hold part of it, so it stays paused until a complete "
        "update or an operator's resume");
  }
  ForEachJoined([&](UpdateEvents* events) { events->Failed(early); });
}

absl::Status UpdateRun::Verify(size_t feed, const Share& s, uint64_t span) {
  const std::string& session = feed_state_[feed].session_id;
  const auto refused = [&](const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat("bucket ", s.sequence, ": slot ", s.slot, " of session ",
                                     session, ": ", status.message(), "; nothing was sent"));
  };
  if (context_.checksum == ChecksumKind::kNone) {
    // Unread here, the slot is first read by the broadcast, where a host-mode slot the trainer
    // truncated fails mid-way: make sure it still holds its bytes.
    absl::Status intact = s.memory->CheckIntact();
    return intact.ok() ? intact : refused(intact);
  }
  // Verified before any byte moves: a trainer-side copy bug must not reach an engine.
  const bool sampled = s.checksum_kind == ChecksumKind::kCrc32Sampled;
  absl::StatusOr<uint32_t> checked =
      sampled ? s.memory->SampledChecksum(span) : s.memory->Checksum(span);
  if (!checked.ok()) return refused(checked.status());
  const uint32_t crc = *checked;
  if (crc != s.checksum) {
    return absl::DataLossError(absl::StrCat(
        "bucket ", s.sequence, ": checksum mismatch: the trainer announced ",
        ChecksumKindName(s.checksum_kind), " ", Crc32Hex(s.checksum), " but slot ", s.slot,
        " of session ", session, " holds ", Crc32Hex(crc), " over ", span, " bytes",
        sampled ? absl::StrCat(" (", SampledBytes(span), " of them sampled)") : "",
        "; nothing was sent"));
  }
  return absl::OkStatus();
}

absl::Status UpdateRun::Fill(size_t feed, const Share& s, uint64_t span) {
  absl::Status filled = s.memory->FillFrom(s.pulled.pieces, span);
  if (!filled.ok()) {
    return absl::Status(
        filled.code(),
        absl::StrCat("bucket ", s.sequence, ": copying the trainer's tensors into slot ", s.slot,
                     " of session ", feed_state_[feed].session_id, " failed: ", filled.message(),
                     "; nothing was sent"));
  }
  if (UpdateEvents* events = feed_state_[feed].events.load()) events->SourcesRead(s.sequence);
  return absl::OkStatus();
}

absl::Status UpdateRun::CheckInPlace(size_t feed, const Share& s) {
  for (const std::shared_ptr<SourceMemory>& source : s.pulled.keep) {
    absl::Status intact = source->CheckIntact();
    if (!intact.ok()) {
      return absl::Status(intact.code(), absl::StrCat("bucket ", s.sequence, " of session ",
                                                      feed_state_[feed].session_id, ": ",
                                                      intact.message(), "; nothing was sent"));
    }
  }
  return absl::OkStatus();
}

const void* UpdateRun::DirectSource(const PulledSources& pulled,
                                    const BucketManifest& manifest) const {
  const std::vector<SourcePiece>& pieces = pulled.pieces;
  if (pieces.empty() || pulled.keep.size() != 1 || pieces.front().offset != 0) return nullptr;
  const char* base = static_cast<const char*>(pieces.front().src);
  for (const SourcePiece& piece : pieces) {
    if (static_cast<const char*>(piece.src) != base + piece.offset) return nullptr;
  }
  // A colocated engine views the bytes in their dtypes, which torch refuses at a misaligned
  // offset: where engines read the bytes in place (IPC), read in place only where every tensor
  // starts on its dtype's boundary, and copy a misaligned layout into the slot, where the planner
  // aligned it. (Mappings start on a page or a 256-byte boundary, so the address says what the
  // offset in the allocation is.) A broadcast moves bytes and takes any layout.
  if (group_->transport_kind().engines_read_in_place()) {
    for (const TensorEntry& t : manifest.tensors) {
      if (reinterpret_cast<uintptr_t>(base + t.offset) % DTypeSize(t.dtype) != 0) return nullptr;
    }
  }
  return base;
}

void UpdateRun::SenderLoop() {
  // A bucket whose launch failed fails the update; none after it may reach an engine.
  bool previous_launched = true;
  while (true) {
    Pending p;
    uint64_t index = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // The front bucket goes once every feed's share is there; a share missing at the bucket's
      // deadline fails the update (the others' slots wait for nothing).
      while (true) {
        if (!queue_.empty() && (queue_.front().present == queue_.front().needed || !failure_.ok() ||
                                !previous_launched)) {
          break;
        }
        if (closing_) break;
        if (queue_.empty()) {
          cv_.wait(lock);
          continue;
        }
        if (absl::Now() >= queue_.front().deadline) {
          absl::Status late = absl::DeadlineExceededError(absl::StrCat(
              MissingShares(taken_, queue_.front()), " after ",
              absl::FormatDuration(context_.bucket_timeout), "; nothing of it was sent"));
          lock.unlock();
          ReportFailure(std::move(late));
          lock.lock();
          continue;
        }
        cv_.wait_until(lock, absl::ToChronoTime(queue_.front().deadline));
      }
      if (queue_.empty()) break;
      if (queue_.front().present != queue_.front().needed && failure_.ok() && previous_launched) {
        // Closing with a share missing: a commit whose feeds sent unequal numbers of buckets.
        Fail(absl::FailedPreconditionError(
            absl::StrCat(MissingShares(taken_, queue_.front()), "; nothing of it was sent")));
      }
      p = std::move(queue_.front());
      queue_.pop_front();
      index = taken_++;
      last_progress_ = absl::Now();
      if (!failure_.ok() || !previous_launched) {
        // After a failure queued buckets are dropped: the trainer gets the failure, not SlotFree.
        ReleaseShares(p, SlotState::kQueued);
        cv_.notify_all();
        continue;
      }
    }
    for (size_t i = 0; i < p.shares.size(); ++i) {
      if (!p.shares[i].present) continue;
      (void)pool_->Transition(feeds_[i].device, p.shares[i].slot, feed_state_[i].session_id,
                              SlotState::kQueued, SlotState::kSending);
    }
    const absl::Time turn = absl::Now();
    const uint64_t span = p.manifest.span_bytes();
    absl::Status status;
    bool pull = false;
    bool copied = false;
    for (size_t i = 0; i < p.shares.size() && status.ok(); ++i) {
      Share& share = p.shares[i];
      if (!share.present) continue;
      const bool share_pull = !share.pulled.pieces.empty();
      pull = pull || share_pull;
      share.direct = share_pull ? DirectSource(share.pulled, p.manifest) : nullptr;
      if (share.direct != nullptr && span <= share.memory->bytes() &&
          group_->transport_kind().engines_read_in_place() &&
          !ReadInPlacePays(share.pulled.keep.front()->bytes(), span)) {
        share.direct = nullptr;  // a slot's copy costs the engines less than the mapping
      }
      copied = copied || share.direct == nullptr;
      status = share.direct != nullptr ? CheckInPlace(i, share)
               : share_pull            ? Fill(i, share, span)
                                       : Verify(i, share, span);
      // Once copied, the mappings stay in the session's table only; read in place, this bucket
      // holds them until its engines are done.
      if (share.direct == nullptr) share.pulled.keep.clear();
    }
    const double verify_seconds = (context_.checksum != ChecksumKind::kNone || pull) && copied
                                      ? absl::ToDoubleSeconds(absl::Now() - turn)
                                      : 0;
    std::unique_ptr<BucketHandle> handle;
    if (status.ok()) {
      // This thread launches the bucket (a broadcast: writes the requests and queues the
      // broadcast) before it fills the next slot.
      BucketContext bucket;
      bucket.update_id = context_.update_id;
      bucket.version = context_.version;
      bucket.last = p.last;
      const Share& first =
          *std::find_if(p.shares.begin(), p.shares.end(), [](const Share& s) { return s.present; });
      if (!pull && context_.checksum != ChecksumKind::kNone &&
          first.checksum_kind == ChecksumKind::kCrc32) {
        bucket.checksum = first.checksum;
        bucket.checksum_kind = ChecksumKind::kCrc32;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        bucket.index = transfers_started_;
      }
      std::vector<BucketSource> sources;
      for (size_t i = 0; i < p.shares.size(); ++i) {
        const Share& share = p.shares[i];
        if (!share.present) continue;
        sources.push_back(
            BucketSource{feeds_[i].device, share.memory, share.direct,
                         share.direct != nullptr ? share.pulled.keep.front().get() : nullptr});
      }
      auto started =
          group_->StartBucket(sources, p.manifest, bucket, absl::Now() + context_.bucket_timeout);
      if (started.ok()) {
        handle = std::move(*started);
        previous_launched = handle->launched();
      } else {
        status = started.status();
      }
      if (!status.ok()) {
        // A failing earlier bucket breaks the group under this one ("not updating"): once the
        // buckets in flight are settled, their failure is the one to report, not this echo.
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return transfers_settled_ == transfers_started_; });
        if (!failure_.ok()) {
          ReleaseShares(p, SlotState::kSending);
          continue;
        }
      }
    }
    if (!status.ok()) {
      ReleaseShares(p, SlotState::kSending);
      ReportFailure(status);
      continue;
    }
    WSYNC_LOG(Debug, "update ", context_.update_id, " bucket ", index, " (", span, " bytes, ",
              p.shares.size(), " share(s)", pull ? (copied ? ", pulled" : ", read in place") : "",
              "): started; ", pull ? "fill " : "verify ", verify_seconds * 1e3, " ms, then ",
              absl::ToDoubleMilliseconds(absl::Now() - turn) - verify_seconds * 1e3,
              " ms to launch (requests written, broadcast queued)");
    std::lock_guard<std::mutex> lock(mu_);
    if (first_launch_ == absl::InfinitePast()) first_launch_ = absl::Now();
    ++transfers_started_;
    InFlight f;
    f.pending = std::move(p);
    f.handle = std::move(handle);
    f.turn = turn;
    f.verify_seconds = verify_seconds;
    in_flight_.push_back(std::move(f));
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mu_);
  sender_done_ = true;
  cv_.notify_all();
}

bool UpdateRun::TakeNext(std::deque<InFlight>& queue, const bool& done, InFlight* out) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue.empty() || done; });
  if (queue.empty()) return false;
  *out = std::move(queue.front());
  queue.pop_front();
  out->failed_before = out->failed_before || !failure_.ok();
  return true;
}

void UpdateRun::ReuseLoop() {
  InFlight f;
  while (TakeNext(in_flight_, sender_done_, &f)) {
    // A bucket started before an earlier one failed still completes (its data movement is queued
    // and its engines expect it) unless the transport was aborted, which ends it at once.
    const Pending& p = f.pending;
    f.sent = f.handle->WaitReusable();
    f.sent_at = absl::Now();
    WSYNC_LOG(Debug, "update ", context_.update_id, " bucket of ", p.manifest.span_bytes(),
              " bytes: sources ", f.sent.ok() ? "reusable" : "failed");
    if (f.sent.ok()) {
      ReleaseShares(p, SlotState::kSending);
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.ok()) f.failed_before = true;
    }
    for (size_t i = 0; i < p.shares.size() && f.sent.ok(); ++i) {
      UpdateEvents* events = feed_state_[i].events.load();
      if (events == nullptr || !p.shares[i].present) continue;
      if (!f.failed_before) events->SlotFree(p.shares[i].slot);
      // Read in place, the trainer's tensors were in use until now.
      if (p.shares[i].direct != nullptr) events->SourcesRead(p.shares[i].sequence);
    }
    std::lock_guard<std::mutex> lock(mu_);
    sent_.push_back(std::move(f));
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mu_);
  sent_loop_done_ = true;
  cv_.notify_all();
}

void UpdateRun::AnswerLoop() {
  InFlight f;
  while (TakeNext(sent_, sent_loop_done_, &f)) {
    const Pending& p = f.pending;
    const uint64_t span = p.manifest.span_bytes();
    const absl::StatusOr<WireTiming>& sent = f.sent;
    const absl::Time sent_at = f.sent_at;
    const bool failed_before = f.failed_before;
    std::vector<EngineOutcome> outcomes;
    absl::Status status = f.handle->WaitAnswered(&outcomes);
    if (status.ok() && !sent.ok()) status = sent.status();
    // The engines' own answer time: this thread may reach a bucket after its answer came.
    const absl::Time answered_at =
        f.handle->answered_at() != absl::InfinitePast() ? f.handle->answered_at() : absl::Now();
    WSYNC_LOG(Debug, "update ", context_.update_id, " bucket of ", span, " bytes: sent ",
              sent.ok() ? "ok" : sent.status().ToString(), ", answered: ", status.ToString());
    if (!sent.ok()) ReleaseShares(p, SlotState::kSending);
    bool direct = false;
    for (const Share& share : p.shares) direct = direct || share.direct != nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (status.ok()) {
        ++buckets_;
        if (direct) ++buckets_read_in_place_;
        bytes_ += span;
        if (std::optional<WireVolume> volume = f.handle->volume()) {
          if (!wire_volume_) wire_volume_.emplace();
          *wire_volume_ += *volume;
        }
        for (const EngineOutcome& o : outcomes) {
          auto it = std::find_if(engine_progress_.begin(), engine_progress_.end(),
                                 [&](const EngineProgressView& e) { return e.engine == o.engine; });
          if (it == engine_progress_.end()) {
            EngineProgressView fresh;
            fresh.engine = o.engine;
            it = engine_progress_.insert(engine_progress_.end(), std::move(fresh));
          }
          if (!o.status.ok()) {
            // A quorum group went on without it.
            if (it->left_out.empty()) it->left_out = std::string(o.status.message());
            continue;
          }
          ++it->buckets_answered;
          it->last_answer_seconds = o.answer_seconds;
          it->total_answer_seconds += o.answer_seconds;
        }
      } else {
        Fail(status);
        for (const auto& o : outcomes) bucket_outcomes_.push_back(o);
      }
      ++transfers_settled_;
      last_progress_ = absl::Now();
      cv_.notify_all();
    }
    // How long the engines, done with the previous bucket, waited for this one's request.
    const absl::Time written_at = f.handle->requests_written_at();
    const double request_late =
        written_at != absl::InfinitePast() && previous_answered_at_ != absl::InfinitePast()
            ? std::max(0.0, absl::ToDoubleSeconds(written_at - previous_answered_at_))
            : 0.0;
    previous_answered_at_ = f.handle->answered_at();
    if (!status.ok()) {
      ReportFailure(status);
      continue;
    }
    if (failed_before) continue;
    BucketTiming timing;
    timing.verify = f.verify_seconds;
    // The first bucket's "idle" is the time since the previous update's last broadcast.
    timing.idle = first_done_ ? sent->idle_seconds : 0;
    first_done_ = true;
    timing.wire = sent->wire_seconds;
    // The engines may answer before this run's reuse thread stamps sent_at (the answer is the
    // handle's own time); their answer then cost nothing after the sources were free.
    timing.answer = std::max(0.0, absl::ToDoubleSeconds(answered_at - sent_at));
    timing.request_late = request_late;
    timing.total = absl::ToDoubleSeconds(answered_at - f.turn);
    {
      std::lock_guard<std::mutex> lock(mu_);
      totals_.verify += timing.verify;
      totals_.idle += timing.idle;
      totals_.wire += timing.wire;
      totals_.answer += timing.answer;
      totals_.request_late += timing.request_late;
      totals_.total += timing.total;
    }
    if (context_.on_bucket) context_.on_bucket(span, timing);
    for (size_t i = 0; i < p.shares.size(); ++i) {
      if (!p.shares[i].present) continue;
      if (UpdateEvents* events = feed_state_[i].events.load()) {
        events->BucketDone(p.shares[i].sequence, span,
                           static_cast<uint32_t>(p.manifest.tensors.size()), timing);
      }
    }
  }
}

void UpdateRun::NotePlan(size_t feed, uint64_t buckets, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (streams_) {
    // Each feed sends buckets of its own: the update's plan is the sum of theirs.
    Feed& f = feed_state_.at(feed);
    buckets_planned_ += buckets - std::exchange(f.planned_buckets, buckets);
    bytes_planned_ += bytes - std::exchange(f.planned_bytes, bytes);
    return;
  }
  // Every feed sends the same buckets (its own share of each): the largest plan is the update's.
  buckets_planned_ = std::max(buckets_planned_, buckets);
  bytes_planned_ = std::max(bytes_planned_, bytes);
}

UpdateProgressView UpdateRun::Progress() {
  std::lock_guard<std::mutex> lock(mu_);
  UpdateProgressView v;
  v.update_id = context_.update_id;
  v.group = group_->spec().name;
  v.version = context_.version;
  v.buckets_done = buckets_;
  v.bytes_done = bytes_;
  v.buckets_planned = buckets_planned_;
  v.bytes_planned = bytes_planned_;
  v.wire_volume = wire_volume_;
  v.seconds = absl::ToDoubleSeconds(absl::Now() - started_);
  v.engines = engine_progress_;
  return v;
}

absl::Status UpdateRun::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

UpdateOutcome UpdateRun::Commit(size_t feed) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!finished_ && !finishing_) {
      feed_state_.at(feed).committed = true;
      cv_.notify_all();
      // A TP group's update commits once every rank committed: the engines record the version
      // only when all their ranks hold all of it.
      const auto all_committed = [&] {
        for (const Feed& f : feed_state_) {
          if (!f.committed) return false;
        }
        return true;
      };
      // Streams: the other ranks may still be sending parts of their own, so the wait runs on
      // while their buckets arrive (each arrival moves last_progress_ and wakes this wait).
      const absl::Time first = absl::Now();
      const auto deadline = [&] {
        return (streams_ ? std::max(first, last_progress_) : first) + context_.bucket_timeout;
      };
      while (!all_committed() && failure_.ok() && !finishing_ && !finished_ &&
             absl::Now() < deadline()) {
        cv_.wait_until(lock, absl::ToChronoTime(deadline()));
      }
      if (!all_committed() && failure_.ok() && !finishing_ && !finished_) {
        std::vector<std::string> waiting;
        for (size_t i = 0; i < feed_state_.size(); ++i) {
          if (!feed_state_[i].committed) waiting.push_back(FeedProgress(i));
        }
        Fail(absl::DeadlineExceededError(absl::StrCat(
            "update ", context_.update_id, ": no commit within ",
            absl::FormatDuration(context_.bucket_timeout), ": ", absl::StrJoin(waiting, "; "),
            "; the engines keep their earlier version")));
      }
    }
  }
  return Finish(true, absl::OkStatus());
}

UpdateOutcome UpdateRun::Abort(absl::Status reason) { return Finish(false, std::move(reason)); }

UpdateOutcome UpdateRun::Finish(bool commit, absl::Status reason, bool tell_every_feed) {
  absl::Status failed;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (finishing_ || finished_) {
      // Another member finishes it: every member hears the same outcome.
      cv_.wait(lock, [&] { return finished_; });
      return outcome_;
    }
    finishing_ = true;
    if (!commit) {
      Fail(reason);
      // Buckets not yet on the wire are dropped; one already sending completes (or times out),
      // so no engine sees part of a bucket.
      for (const Pending& p : queue_) ReleaseShares(p, SlotState::kQueued);
      queue_.clear();
    }
    closing_ = true;
    failed = failure_;
    cv_.notify_all();
  }
  // The other trainer ranks of a TP group may be waiting for a SlotFree that will not come, or
  // blocked reading their streams: they hear the failure now, not at their deadlines. (One
  // member's own stream gets its outcome from Finish's caller.)
  // (Until finished_ is set every member's stream is alive: each waits for the outcome.)
  if ((feeds_.size() > 1 || tell_every_feed) && !failed.ok()) ReportFailure(failed);
  if (sender_.joinable()) sender_.join();
  if (reuse_thread_.joinable()) reuse_thread_.join();
  if (answer_thread_.joinable()) answer_thread_.join();

  UpdateOutcome outcome;
  outcome.update_id = context_.update_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    outcome.status = failure_;
    outcome.engines = bucket_outcomes_;
    outcome.buckets = buckets_;
    outcome.buckets_read_in_place = buckets_read_in_place_;
    outcome.bytes = bytes_;
    outcome.wire_volume = wire_volume_;
    outcome.bucket_totals = totals_;
    if (first_launch_ != absl::InfinitePast()) {
      outcome.first_launch_seconds = absl::ToDoubleSeconds(first_launch_ - started_);
    }
    for (const Feed& f : feed_state_) {
      if (!f.session_id.empty()) outcome.sessions.push_back(f.session_id);
    }
  }
  if (outcome.status.ok() && commit && outcome.buckets == 0) {
    outcome.status = absl::FailedPreconditionError("commit of an update with no bucket");
  }
  if (outcome.status.ok()) {
    outcome.engines.clear();
    const absl::Time finishing = absl::Now();
    outcome.status = group_->FinishUpdate(UpdateInfo{context_.update_id, context_.version},
                                          absl::Now() + context_.bucket_timeout, &outcome.engines);
    outcome.finish_seconds = absl::ToDoubleSeconds(absl::Now() - finishing);
  } else {
    group_->AbortUpdate(std::string(outcome.status.message()), &outcome.engines);
  }
  if (!outcome.status.ok()) {
    std::vector<std::string> paused;
    for (const EngineOutcome& e : outcome.engines) {
      if (!e.needs_full_version.empty()) paused.push_back(e.engine);
    }
    if (!paused.empty()) {
      outcome.status = absl::Status(
          outcome.status.code(),
          absl::StrCat(outcome.status.message(),
                       "; left paused, waiting for a full version: ", absl::StrJoin(paused, ", ")));
    }
  }
  for (size_t i = 0; i < feeds_.size(); ++i) {
    if (!feed_state_[i].session_id.empty()) {
      pool_->ResetSession(feeds_[i].device, feed_state_[i].session_id);
    }
  }
  outcome.seconds = absl::ToDoubleSeconds(absl::Now() - started_);
  if (on_done_) on_done_(outcome);
  {
    std::lock_guard<std::mutex> lock(mu_);
    outcome_ = outcome;
    finished_ = true;
    cv_.notify_all();
  }
  return outcome;
}

UpdateMember::~UpdateMember() {
  if (!finished_) Abort(absl::AbortedError("update dropped without commit or abort"));
}

UpdateOutcome UpdateMember::Commit() {
  finished_ = true;
  return run_->Commit(feed_);
}

UpdateOutcome UpdateMember::Abort(absl::Status reason) {
  finished_ = true;
  return run_->Abort(std::move(reason));
}

}  // namespace wsync
