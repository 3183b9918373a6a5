#include "daemon/core/update_run.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace wsync {

UpdateRun::UpdateRun(UpdateContext context, std::shared_ptr<WeightGroup> group, BufferPool* pool,
                     UpdateEvents* events, DoneCallback on_done)
    : context_(std::move(context)),
      group_(std::move(group)),
      pool_(pool),
      events_(events),
      on_done_(std::move(on_done)),
      started_(absl::Now()) {
  sender_ = std::thread([this] { SenderLoop(); });
  reuse_thread_ = std::thread([this] { ReuseLoop(); });
  answer_thread_ = std::thread([this] { AnswerLoop(); });
}

UpdateRun::~UpdateRun() {
  bool finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished = finished_;
  }
  if (!finished) Abort(absl::AbortedError("update dropped without commit or abort"));
  if (sender_.joinable()) sender_.join();
  if (reuse_thread_.joinable()) reuse_thread_.join();
  if (answer_thread_.joinable()) answer_thread_.join();
}

uint32_t UpdateRun::world_size() const { return group_->Snapshot().world_size; }

void UpdateRun::Fail(absl::Status status) {
  if (failure_.ok()) failure_ = std::move(status);
}

absl::Status UpdateRun::SubmitBucket(uint32_t slot, BucketManifest manifest, uint32_t checksum,
                                     uint64_t sequence, PulledSources pulled, bool last) {
  std::unique_lock<std::mutex> lock(mu_);
  if (finished_ || closing_) {
    return absl::FailedPreconditionError(
        absl::StrCat("bucket ", sequence, " arrived after the update was committed or aborted"));
  }
  if (!failure_.ok()) return failure_;
  auto memory = pool_->Get(context_.device, slot, context_.session_id);
  if (!memory.ok()) {
    Fail(absl::Status(memory.status().code(),
                      absl::StrCat("bucket ", sequence, ": ", memory.status().message())));
    return failure_;
  }
  absl::Status valid = ValidateManifest(manifest, (*memory)->bytes());
  if (valid.ok()) valid = group_->ValidateBucket(manifest);
  if (valid.ok()) {
    for (const TensorEntry& t : manifest.tensors) {
      if (names_.count(t.name) != 0) {
        valid = absl::InvalidArgumentError(
            absl::StrCat("duplicate tensor name '", t.name, "': already sent in this update"));
        break;
      }
    }
  }
  if (!valid.ok()) {
    Fail(absl::Status(valid.code(),
                      absl::StrCat("bucket ", sequence, " refused: ", valid.message())));
    return failure_;
  }
  absl::Status moved = pool_->Transition(context_.device, slot, context_.session_id,
                                         SlotState::kFilling, SlotState::kQueued);
  if (!moved.ok()) {
    Fail(absl::Status(moved.code(), absl::StrCat("bucket ", sequence, ": ", moved.message())));
    return failure_;
  }
  for (const TensorEntry& t : manifest.tensors) names_.insert(t.name);
  WSYNC_LOG(Debug, "update ", context_.update_id, " bucket ", sequence, " (slot ", slot, ", ",
            manifest.span_bytes(), " bytes", pulled.pieces.empty() ? "" : ", pull", "): received");
  queue_.push_back(
      Pending{slot, *memory, std::move(manifest), checksum, sequence, last, std::move(pulled)});
  cv_.notify_all();
  return absl::OkStatus();
}

void UpdateRun::ReleaseSlot(uint32_t slot, SlotState from) {
  (void)pool_->Transition(context_.device, slot, context_.session_id, from, SlotState::kFilling);
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
  events_->Failed(early);
}

absl::Status UpdateRun::Verify(const Pending& p) {
  const auto refused = [&](const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat("bucket ", p.sequence, ": slot ", p.slot, " of session ",
                                     context_.session_id, ": ", s.message(), "; nothing was sent"));
  };
  if (!context_.verify_checksums) {
    // Unread here, the slot is first read by the broadcast, where a host-mode slot the trainer
    // truncated fails mid-way: make sure it still holds its bytes.
    absl::Status intact = p.memory->CheckIntact();
    return intact.ok() ? intact : refused(intact);
  }
  // Verified before any byte moves: a trainer-side copy bug must not reach an engine.
  const uint64_t span = p.manifest.span_bytes();
  absl::StatusOr<uint32_t> checked = p.memory->Checksum(span);
  if (!checked.ok()) return refused(checked.status());
  const uint32_t crc = *checked;
  if (crc != p.checksum) {
    return absl::DataLossError(
        absl::StrCat("bucket ", p.sequence, ": checksum mismatch: the trainer announced crc32 ",
                     Crc32Hex(p.checksum), " but slot ", p.slot, " holds ", Crc32Hex(crc), " over ",
                     span, " bytes; nothing was sent"));
  }
  return absl::OkStatus();
}

absl::Status UpdateRun::Fill(const Pending& p) {
  auto crc = p.memory->FillFrom(p.pulled.pieces, p.manifest.span_bytes());
  if (!crc.ok()) {
    return absl::Status(
        crc.status().code(),
        absl::StrCat("bucket ", p.sequence, ": copying the trainer's tensors into slot ", p.slot,
                     " of session ", context_.session_id, " failed: ", crc.status().message(),
                     "; nothing was sent"));
  }
  events_->SourcesRead(p.sequence);
  return absl::OkStatus();
}

absl::Status UpdateRun::CheckInPlace(const Pending& p) {
  for (const std::shared_ptr<SourceMemory>& source : p.pulled.keep) {
    absl::Status intact = source->CheckIntact();
    if (!intact.ok()) {
      return absl::Status(intact.code(),
                          absl::StrCat("bucket ", p.sequence, " of session ", context_.session_id,
                                       ": ", intact.message(), "; nothing was sent"));
    }
  }
  return absl::OkStatus();
}

const void* UpdateRun::DirectSource(const Pending& p) const {
  const std::vector<SourcePiece>& pieces = p.pulled.pieces;
  if (pieces.empty() || p.pulled.keep.size() != 1 || pieces.front().offset != 0) return nullptr;
  const char* base = static_cast<const char*>(pieces.front().src);
  for (const SourcePiece& piece : pieces) {
    if (static_cast<const char*>(piece.src) != base + piece.offset) return nullptr;
  }
  // A colocated engine views the bytes in their dtypes, which torch refuses at a misaligned
  // offset: over IPC, read in place only where every tensor starts on its dtype's boundary, and
  // copy a misaligned layout into the slot, where the planner aligned it. (Mappings start on a
  // page or a 256-byte boundary, so the address says what the offset in the allocation is.) A
  // broadcast moves bytes and takes any layout.
  if (group_->spec().transport == TransportKind::kIpc) {
    for (const TensorEntry& t : p.manifest.tensors) {
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
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
      if (queue_.empty()) break;
      p = std::move(queue_.front());
      queue_.pop_front();
      if (!failure_.ok() || !previous_launched) {
        // After a failure queued buckets are dropped: the trainer gets the failure, not SlotFree.
        ReleaseSlot(p.slot, SlotState::kQueued);
        continue;
      }
    }
    (void)pool_->Transition(context_.device, p.slot, context_.session_id, SlotState::kQueued,
                            SlotState::kSending);
    const absl::Time turn = absl::Now();
    const bool pull = !p.pulled.pieces.empty();
    p.direct = pull ? DirectSource(p) : nullptr;
    absl::Status status = p.direct != nullptr ? CheckInPlace(p) : pull ? Fill(p) : Verify(p);
    const double verify_seconds = (context_.verify_checksums || pull) && p.direct == nullptr
                                      ? absl::ToDoubleSeconds(absl::Now() - turn)
                                      : 0;
    // Once copied, the mappings stay in the session's table only; read in place, this bucket
    // holds them until its broadcast is done.
    if (p.direct == nullptr) p.pulled.keep.clear();
    std::unique_ptr<BucketHandle> handle;
    if (status.ok()) {
      // This thread launches the bucket (a broadcast: writes the requests and queues the
      // broadcast) before it fills the next slot.
      BucketContext bucket;
      bucket.update_id = context_.update_id;
      bucket.version = context_.version;
      bucket.last = p.last;
      {
        std::lock_guard<std::mutex> lock(mu_);
        bucket.index = transfers_started_;
      }
      const SourceMemory* direct_memory =
          p.direct != nullptr ? p.pulled.keep.front().get() : nullptr;
      auto started =
          group_->StartBucket({BucketSource{context_.device, p.memory, p.direct, direct_memory}},
                              p.manifest, bucket, absl::Now() + context_.bucket_timeout);
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
          ReleaseSlot(p.slot, SlotState::kSending);
          continue;
        }
      }
    }
    if (!status.ok()) {
      ReleaseSlot(p.slot, SlotState::kSending);
      ReportFailure(status);
      continue;
    }
    WSYNC_LOG(Debug, "update ", context_.update_id, " bucket ", p.sequence, " (slot ", p.slot, ", ",
              p.manifest.span_bytes(), " bytes",
              p.direct ? ", read in place"
              : pull   ? ", pulled"
                       : "",
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
    WSYNC_LOG(Debug, "update ", context_.update_id, " bucket ", p.sequence, " (slot ", p.slot, ", ",
              p.manifest.span_bytes(), " bytes): sources ", f.sent.ok() ? "reusable" : "failed");
    if (f.sent.ok()) {
      ReleaseSlot(p.slot, SlotState::kSending);
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.ok()) f.failed_before = true;
    }
    if (f.sent.ok() && !f.failed_before) events_->SlotFree(p.slot);
    // Read in place, the trainer's tensors were in use until now.
    if (f.sent.ok() && p.direct != nullptr) events_->SourcesRead(p.sequence);
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
    const absl::StatusOr<BroadcastTiming>& sent = f.sent;
    const absl::Time sent_at = f.sent_at;
    const bool failed_before = f.failed_before;
    std::vector<EngineOutcome> outcomes;
    absl::Status status = f.handle->WaitAnswered(&outcomes);
    if (status.ok() && !sent.ok()) status = sent.status();
    // The engines' own answer time: this thread may reach a bucket after its answer came.
    const absl::Time answered_at =
        f.handle->answered_at() != absl::InfinitePast() ? f.handle->answered_at() : absl::Now();
    WSYNC_LOG(Debug, "update ", context_.update_id, " bucket ", p.sequence, ": sent ",
              sent.ok() ? "ok" : sent.status().ToString(), ", answered: ", status.ToString());
    if (!sent.ok()) ReleaseSlot(p.slot, SlotState::kSending);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (status.ok()) {
        ++buckets_;
        if (p.direct != nullptr) ++buckets_read_in_place_;
        bytes_ += span;
      } else {
        Fail(status);
        for (const auto& o : outcomes) bucket_outcomes_.push_back(o);
      }
      ++transfers_settled_;
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
    timing.idle_before = first_done_ ? sent->idle_before_seconds : 0;
    first_done_ = true;
    timing.active = sent->active_seconds;
    timing.answer = absl::ToDoubleSeconds(answered_at - sent_at);
    timing.request_late = request_late;
    timing.total = absl::ToDoubleSeconds(answered_at - f.turn);
    {
      std::lock_guard<std::mutex> lock(mu_);
      totals_.verify += timing.verify;
      totals_.idle_before += timing.idle_before;
      totals_.active += timing.active;
      totals_.answer += timing.answer;
      totals_.request_late += timing.request_late;
      totals_.total += timing.total;
    }
    events_->BucketDone(p.sequence, span, static_cast<uint32_t>(p.manifest.tensors.size()), timing);
  }
}

absl::Status UpdateRun::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

UpdateOutcome UpdateRun::Commit() { return Finish(true, absl::OkStatus()); }

UpdateOutcome UpdateRun::Abort(absl::Status reason) { return Finish(false, std::move(reason)); }

UpdateOutcome UpdateRun::Finish(bool commit, absl::Status reason) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (finished_) {
      UpdateOutcome done;
      done.update_id = context_.update_id;
      done.status = absl::FailedPreconditionError("update already finished");
      return done;
    }
    if (!commit) {
      Fail(reason);
      // Buckets not yet on the wire are dropped; one already sending completes (or times out),
      // so no engine sees part of a bucket.
      for (const Pending& p : queue_) ReleaseSlot(p.slot, SlotState::kQueued);
      queue_.clear();
    }
    closing_ = true;
    cv_.notify_all();
  }
  if (sender_.joinable()) sender_.join();
  if (reuse_thread_.joinable()) reuse_thread_.join();
  if (answer_thread_.joinable()) answer_thread_.join();

  UpdateOutcome outcome;
  outcome.update_id = context_.update_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    outcome.status = failure_;
    outcome.engines = bucket_outcomes_;
    outcome.buckets = buckets_;
    outcome.buckets_read_in_place = buckets_read_in_place_;
    outcome.bytes = bytes_;
    outcome.bucket_totals = totals_;
    if (first_launch_ != absl::InfinitePast()) {
      outcome.first_launch_seconds = absl::ToDoubleSeconds(first_launch_ - started_);
    }
  }
  if (outcome.status.ok() && commit && outcome.buckets == 0) {
    outcome.status = absl::FailedPreconditionError("commit of an update with no bucket");
  }
  if (outcome.status.ok()) {
    outcome.engines.clear();
    const absl::Time finishing = absl::Now();
    outcome.status =
        group_->FinishUpdate(UpdateInfo{context_.update_id, context_.version}, &outcome.engines);
    outcome.finish_seconds = absl::ToDoubleSeconds(absl::Now() - finishing);
  } else {
    group_->AbortUpdate(std::string(outcome.status.message()));
  }
  pool_->ResetSession(context_.device, context_.session_id);
  outcome.seconds = absl::ToDoubleSeconds(absl::Now() - started_);
  if (on_done_) on_done_(outcome);
  return outcome;
}

}  // namespace wsync
