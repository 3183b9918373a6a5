#include "daemon/service/update_stream_events.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "common/log.h"
#include "daemon/wire/engine_result_proto.h"
#include "daemon/wire/wire_volume_proto.h"

namespace wsync {
namespace {

void SetTiming(const BucketTiming& timing, v1::Timing* out) {
  out->set_verify_seconds(timing.verify);
  out->set_idle_seconds(timing.idle);
  out->set_wire_seconds(timing.wire);
  out->set_answer_seconds(timing.answer);
  out->set_request_late_seconds(timing.request_late);
}

}  // namespace

UpdateStreamEvents::UpdateStreamEvents(grpc::ServerContext* context, Stream* stream,
                                       absl::Duration stall_timeout)
    : context_(context), stream_(stream), stall_timeout_(stall_timeout) {
  writer_ = std::thread([this] { WriterLoop(); });
  watcher_ = std::thread([this] { WatchLoop(); });
}

UpdateStreamEvents::~UpdateStreamEvents() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  writer_.join();
  watcher_.join();
}

void UpdateStreamEvents::BucketDone(uint64_t sequence, uint64_t bytes, uint32_t tensors,
                                    const BucketTiming& timing) {
  v1::UpdateEvent e;
  auto* done = e.mutable_bucket_done();
  done->set_sequence(sequence);
  done->set_bytes(bytes);
  done->set_tensors(tensors);
  done->set_seconds(timing.total);
  SetTiming(timing, done->mutable_timing());
  // The deprecated names, for clients older than Timing.
  done->set_verify_seconds(timing.verify);
  done->set_idle_before_seconds(timing.idle);
  done->set_broadcast_seconds(timing.wire);
  done->set_answer_seconds(timing.answer);
  done->set_request_late_seconds(timing.request_late);
  Write(std::move(e));
}

void UpdateStreamEvents::SlotFree(uint32_t slot) {
  v1::UpdateEvent e;
  e.mutable_slot_free()->set_slot(slot);
  Write(std::move(e));
}

void UpdateStreamEvents::SourcesRead(uint64_t sequence) {
  v1::UpdateEvent e;
  e.mutable_sources_read()->set_sequence(sequence);
  Write(std::move(e));
}

void UpdateStreamEvents::WriteResult(const UpdateOutcome& outcome) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (result_sent_) return;
    result_sent_ = true;
  }
  Write(ResultEvent(outcome));
}

void UpdateStreamEvents::Write(v1::UpdateEvent e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_) return;
  if (queue_.size() >= kMaxQueued) {
    CancelLocked("the trainer reads none of its update's events");
    return;
  }
  queue_.push_back(std::move(e));
  cv_.notify_all();
}

void UpdateStreamEvents::CancelLocked(const char* why) {
  if (cancelled_) return;
  cancelled_ = true;
  queue_.clear();
  WSYNC_LOG(Warning, "update stream of ", context_->peer(), " cancelled: ", why);
  context_->TryCancel();
  cv_.notify_all();
}

void UpdateStreamEvents::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return !queue_.empty() || closing_ || cancelled_; });
    if (queue_.empty()) break;  // closing (or cancelled) with nothing left to write
    v1::UpdateEvent e = std::move(queue_.front());
    queue_.pop_front();
    writing_since_ = absl::Now();
    lock.unlock();
    const bool written = stream_->Write(e);
    lock.lock();
    writing_since_ = absl::InfinitePast();
    cv_.notify_all();
    if (!written) {
      // The call ended (cancelled, or the trainer went away): nothing more can be written.
      cancelled_ = true;
      queue_.clear();
    }
  }
}

void UpdateStreamEvents::WatchLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!(closing_ && queue_.empty() && writing_since_ == absl::InfinitePast()) && !cancelled_) {
    const absl::Time stalled_at = writing_since_ == absl::InfinitePast()
                                      ? absl::InfiniteFuture()
                                      : writing_since_ + stall_timeout_;
    if (absl::Now() >= stalled_at) {
      CancelLocked(
          "a write of its events waited past the bucket timeout (the trainer is not "
          "reading its stream)");
      break;
    }
    cv_.wait_until(lock, absl::ToChronoTime(std::min(stalled_at, absl::Now() + absl::Seconds(1))));
  }
}

v1::UpdateEvent ResultEvent(const UpdateOutcome& outcome) {
  v1::UpdateEvent e;
  auto* r = e.mutable_result();
  r->set_update_id(outcome.update_id);
  r->set_code(static_cast<int32_t>(outcome.status.code()));
  r->set_message(std::string(outcome.status.message()));
  r->set_buckets(outcome.buckets);
  r->set_bytes(outcome.bytes);
  r->set_seconds(outcome.seconds);
  v1::Timing* timing = r->mutable_timing();
  SetTiming(outcome.bucket_totals, timing);
  timing->set_first_launch_seconds(outcome.first_launch_seconds);
  timing->set_finish_seconds(outcome.finish_seconds);
  // The deprecated names, for clients older than Timing.
  r->set_verify_seconds(outcome.bucket_totals.verify);
  r->set_idle_before_seconds(outcome.bucket_totals.idle);
  r->set_broadcast_seconds(outcome.bucket_totals.wire);
  r->set_answer_seconds(outcome.bucket_totals.answer);
  r->set_request_late_seconds(outcome.bucket_totals.request_late);
  r->set_first_launch_seconds(outcome.first_launch_seconds);
  r->set_finish_seconds(outcome.finish_seconds);
  r->set_buckets_read_in_place(outcome.buckets_read_in_place);
  if (outcome.wire_volume) WireVolumeToProto(*outcome.wire_volume, r->mutable_wire_volume());
  for (const EngineOutcome& o : outcome.engines) EngineOutcomeToProto(o, r->add_engines());
  return e;
}

}  // namespace wsync
