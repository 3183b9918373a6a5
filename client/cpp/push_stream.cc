#include "client/cpp/push_stream.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace wsync {

BucketRules BucketRulesFromProto(const v1::BucketRules& proto) {
  BucketRules rules;
  rules.one_dtype = proto.one_dtype();
  rules.close_after_bytes = proto.close_after_bytes();
  return rules;
}

PushStream::PushStream(v1::Trainer::Stub* stub, std::vector<MappedSlot*> slots,
                       OversizeSlotFn oversize, PushOptions options)
    : stream_(stub, absl::Hours(24)),
      slots_(std::move(slots)),
      oversize_(std::move(oversize)),
      options_(std::move(options)),
      planner_(slots_.front()->bytes(), /*oversize_alone=*/oversize_ != nullptr) {}

absl::StatusOr<std::unique_ptr<PushStream>> PushStream::Begin(
    v1::Trainer::Stub* stub, const std::string& session_id, const std::string& group,
    const std::string& version, std::vector<MappedSlot*> slots, OversizeSlotFn oversize,
    PushOptions options) {
  if (slots.empty()) return absl::FailedPreconditionError("the session holds no slot");
  for (MappedSlot* s : slots) s->UseStream(options.cuda_stream);
  auto push = std::unique_ptr<PushStream>(
      new PushStream(stub, std::move(slots), std::move(oversize), options));
  push->progress_.buckets_total = options.buckets_total;
  if (options.pull_bucket_bytes != 0 && !options.pull && !options.pull_as_group_prefers) {
    return absl::InvalidArgumentError("pull_bucket_bytes is a pull-mode option");
  }
  WSYNC_ASSIGN_OR_RETURN(v1::UpdateStarted started,
                         push->stream_.Begin(session_id, group, version, options.tp_rank));
  if (options.pull_as_group_prefers) {
    options.pull = started.pull_preferred() || options.pull_bucket_bytes != 0;
    push->options_.pull = options.pull;
    // Each pulled allocation then costs wsyncd a mapping per update, where this client's copy of
    // the bucket costs the same copy wsyncd's would.
    push->pull_one_allocation_ = started.pull_one_allocation_per_bucket();
  }
  if (!options.checksums) {
    push->checksum_ = ChecksumKind::kNone;
  } else if (!started.checksum().empty()) {
    // A checksum this client does not know: the full CRC-32, which wsyncd always takes.
    push->checksum_ = ParseChecksumKind(started.checksum()).value_or(ChecksumKind::kCrc32);
  }
  if (options.pull && options.exporter != nullptr) options.exporter->BeginUpdate();
  // The group's engines shape every bucket of this update; no tensor has been planned yet.
  push->planner_ = BucketPlanner(std::max(push->slots_.front()->bytes(), options.pull_bucket_bytes),
                                 /*oversize_alone=*/push->oversize_ != nullptr,
                                 BucketRulesFromProto(started.bucket_rules()));
  push->t0_ = absl::Now();
  for (uint32_t i = 0; i < push->slots_.size(); ++i) push->free_slots_.push_back(i);
  push->reader_ = std::thread([p = push.get()] { p->ReadEvents(); });
  return push;
}

PushStream::~PushStream() {
  if (!ended_by_us_) Abort("push stream dropped without commit");
  if (reader_.joinable()) reader_.join();
}

void PushStream::ReadEvents() {
  v1::UpdateEvent event;
  while (stream_.Next(&event)) {
    std::lock_guard<std::mutex> lock(mu_);
    if (event.has_slot_free()) {
      if (event.slot_free().slot() < slots_.size()) {
        free_slots_.push_back(event.slot_free().slot());
      } else {
        oversize_busy_ = false;
      }
    } else if (event.has_sources_read()) {
      for (Outstanding& o : outstanding_) {
        if (o.sequence == event.sources_read().sequence()) o.finished = true;
      }
    } else if (event.has_bucket_done()) {
      ++progress_.buckets_done;
      progress_.bytes_done += event.bucket_done().bytes();
      progress_.seconds = absl::ToDoubleSeconds(absl::Now() - t0_);
      if (options_.progress) options_.progress(progress_);
    } else if (event.has_result()) {
      // The result is the last event; the sender must stop and half-close so the daemon can
      // end the call.
      result_ = event.result();
      have_result_ = true;
      daemon_ended_ = true;
    }
    // Any event may find an engine's load, still running at SourcesRead, done by now.
    ReleaseFinishedLocked();
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mu_);
  daemon_ended_ = true;
  cv_.notify_all();
}

void PushStream::SetBucketsTotal(uint64_t buckets_total) {
  std::lock_guard<std::mutex> lock(mu_);
  progress_.buckets_total = buckets_total;
}

absl::Status PushStream::Add(const std::vector<TensorRef>& tensors) {
  if (!send_status_.ok()) return send_status_;
  if (ended_by_us_) return absl::FailedPreconditionError("the update was already committed");
  if (options_.tensors_total != 0 && added_ + tensors.size() > options_.tensors_total) {
    return absl::FailedPreconditionError(absl::StrCat("the push was declared to hold ",
                                                      options_.tensors_total, " tensors; ",
                                                      added_ + tensors.size(), " were added"));
  }
  for (const TensorRef& t : tensors) {
    // A tensor follows the held bucket: it was not the last.
    SendHeld(/*last=*/false);
    auto closed = planner_.Add(TensorDesc{t.name, t.dtype, t.shape, t.bytes});
    if (!closed.ok()) return Fail(closed.status());
    ++added_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(t);
      progress_.bytes_total += t.bytes;
    }
    for (size_t i = 0; i < closed->size(); ++i) {
      const PlannedBucket& b = (*closed)[i];
      // Closed with this tensor in it, and no declared count to say whether one follows.
      const bool maybe_last = i + 1 == closed->size() && options_.tensors_total == 0 &&
                              b.tensors.back().index + 1 == added_;
      WSYNC_RETURN_IF_ERROR(SendBucket(b, /*last=*/false, /*hold=*/maybe_last));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<uint32_t, MappedSlot*>> PushStream::AcquireSlot(
    const PlannedBucket& bucket) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    return daemon_ended_ || (bucket.oversize ? !oversize_busy_ : !free_slots_.empty());
  });
  if (daemon_ended_) {
    // The daemon ended the update early (a failure); its final status says why.
    lock.unlock();
    stream_.CloseWrites();
    ended_by_us_ = true;
    if (reader_.joinable()) reader_.join();
    absl::Status final_status = stream_.Finish();
    send_status_ = final_status.ok()
                       ? absl::InternalError("wsyncd ended the update before it was committed")
                       : final_status;
    return send_status_;
  }
  if (bucket.oversize) {
    oversize_busy_ = true;
    lock.unlock();
    auto slot = oversize_(bucket.bytes);
    if (!slot.ok()) return Fail(slot.status());
    slot->second->UseStream(options_.cuda_stream);
    return slot;
  }
  const uint32_t index = free_slots_.front();
  free_slots_.pop_front();
  return std::make_pair(index, slots_[index]);
}

void PushStream::ReleaseFinishedLocked() {
  while (!outstanding_.empty() && outstanding_.front().finished &&
         (outstanding_.front().readers == nullptr || outstanding_.front().readers->ReadersDone())) {
    for (size_t i = 0; i < outstanding_.front().tensors; ++i) pending_.pop_front();
    released_ += outstanding_.front().tensors;
    outstanding_.pop_front();
  }
}

bool PushStream::DescribeSources(const std::vector<TensorRef>& tensors, bool one_allocation,
                                 v1::Bucket* wire) {
  // wsyncd keeps what it maps until the session closes, and CUDA makes freeing memory another
  // process still maps undefined: memory about to be freed is copied instead.
  for (const TensorRef& t : tensors) {
    if (t.temporary) return false;
  }
  if (one_allocation) {
    // Where the allocation is is a cheap lookup; exporting it reads an IPC handle, which a
    // bucket that will be copied anyway (a state_dict's tensors, each its own allocation) must
    // not pay for every tensor.
    std::optional<uintptr_t> start;
    for (const TensorRef& t : tensors) {
      auto s = options_.exporter->AllocationStart(t.data, t.bytes);
      if (!s.ok() || (start.has_value() && *s != *start)) return false;
      start = *s;
    }
  }
  std::vector<ExportedSource> found;
  for (const TensorRef& t : tensors) {
    auto e = options_.exporter->Export(t.data, t.bytes);
    if (!e.ok()) return false;
    found.push_back(std::move(*e));
  }
  for (const ExportedSource& e : found) {
    if (announced_.insert(e.allocation_id).second) {
      v1::SourceAllocation* a = wire->add_allocations();
      a->set_id(e.allocation_id);
      a->set_handle(e.handle);
      a->set_bytes(e.allocation_bytes);
    }
    v1::TensorSource* s = wire->add_sources();
    s->set_allocation(e.allocation_id);
    s->set_offset(e.offset);
  }
  return true;
}

void PushStream::Transmit(const v1::Bucket& wire) {
  if (!stream_.SendBucket(wire)) {
    // The daemon ended the stream; the next wait for a slot collects its status.
    std::lock_guard<std::mutex> lock(mu_);
    daemon_ended_ = true;
  }
}

void PushStream::SendHeld(bool last) {
  if (!held_wire_) return;
  v1::Bucket wire = *std::exchange(held_wire_, std::nullopt);
  wire.set_last(last || wire.last());
  Transmit(wire);
}

absl::Status PushStream::SendBucket(const PlannedBucket& bucket, bool last, bool hold) {
  WSYNC_ASSIGN_OR_RETURN(auto acquired, AcquireSlot(bucket));
  const uint32_t slot_index = acquired.first;
  MappedSlot& slot = *acquired.second;
  // SlotFree came after the engines' answers, but an engine that keeps a live view of the slot
  // (LMDeploy, require_clone false) may still be loading from it on the GPU. Before anything
  // writes the slot or records its event (MarkReady's record would hide the engine's from
  // wsyncd's copy), the engine's record must have completed.
  if (absl::Status s = slot.WaitReaders(options_.engine_read_timeout); !s.ok()) {
    return Fail(absl::Status(s.code(), absl::StrCat("slot ", slot_index, ": ", s.message())));
  }
  v1::Bucket wire;
  wire.set_slot(slot_index);
  const uint64_t sequence = sequence_++;
  wire.set_sequence(sequence);
  // Planned tensors are numbered from the update's first, so the declared count tells whether
  // this bucket holds the final one.
  wire.set_last(last || (options_.tensors_total != 0 &&
                         bucket.tensors.back().index + 1 == options_.tensors_total));
  std::vector<TensorRef> tensors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const PlannedTensor& pt : bucket.tensors)
      tensors.push_back(pending_[pt.index - released_]);
    // The plan as it stands, for the daemon's progress view (a push fed tensor by tensor learns
    // its totals as it goes).
    wire.set_planned_buckets(std::max<uint64_t>(progress_.buckets_total, sequence + 1));
    wire.set_planned_bytes(progress_.bytes_total);
  }
  // A bucket larger than a slot can only be pulled (read in place).
  const bool pull =
      options_.pull && options_.exporter != nullptr &&
      DescribeSources(tensors, pull_one_allocation_ && bucket.bytes <= slot.bytes(), &wire);
  if (!pull && bucket.bytes > slot.bytes()) {
    // Planned past a slot (pull_bucket_bytes) but holding memory wsyncd cannot map: no slot holds
    // it, so nothing of it may be sent.
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "bucket ", sequence, " spans ", bucket.bytes, " bytes, more than a slot (", slot.bytes(),
        "), and holds memory this client cannot export for wsyncd to read in place (host memory, "
        "a temporary copy, an allocation it cannot name); lower pull_bucket_bytes or keep the "
        "tensors in exportable GPU memory")));
  }
  std::vector<SlotCopy> copies;
  for (size_t i = 0; i < bucket.tensors.size(); ++i) {
    const PlannedTensor& pt = bucket.tensors[i];
    const TensorRef& t = tensors[i];
    copies.push_back(SlotCopy{pt.offset, t.data, t.bytes});
    v1::TensorSpec* spec = wire.add_tensors();
    spec->set_name(t.name);
    spec->set_dtype(std::string(DTypeName(t.dtype)));
    for (int64_t d : t.shape) spec->add_shape(d);
    spec->set_offset(pt.offset);
    spec->set_length(t.bytes);
  }
  if (pull) {
    // wsyncd copies; it waits for the caller's stream only if work is still queued there.
    if (absl::Status s = slot.MarkReady(); !s.ok()) return Fail(s);
    ++buckets_pulled_;
  } else {
    // A checksum waits for the copies, so once it is known the caller's tensors are free.
    if (checksum_ == ChecksumKind::kCrc32) {
      auto crc = slot.CopyBatchAndChecksum(copies, bucket.bytes);
      if (!crc.ok()) return Fail(crc.status());
      wire.set_checksum(*crc);
    } else if (absl::Status s = slot.CopyBatch(copies); !s.ok()) {
      return Fail(s);
    } else if (checksum_ == ChecksumKind::kCrc32Sampled) {
      auto crc = slot.SampledChecksum(bucket.bytes);
      if (!crc.ok()) return Fail(crc.status());
      wire.set_checksum(*crc);
    }
    if (checksum_ != ChecksumKind::kNone) {
      wire.set_checksum_algorithm(std::string(ChecksumKindName(checksum_)));
    }
    if (absl::Status s = slot.MarkWritten(); !s.ok()) return Fail(s);
    // Without a checksum nothing has waited for the copies yet.
    if (checksum_ == ChecksumKind::kNone) {
      if (absl::Status s = slot.WaitWritten(); !s.ok()) return Fail(s);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_.push_back(
        // The oversize slot's mapping may be replaced by a larger one: only regular slots, which
        // live as long as the stream, are remembered.
        Outstanding{sequence, bucket.tensors.size(), !pull,
                    pull && !bucket.oversize ? &slot : nullptr});
    ReleaseFinishedLocked();
  }
  if (hold) {
    held_wire_ = std::move(wire);
  } else {
    Transmit(wire);
  }
  return absl::OkStatus();
}

absl::Status PushStream::Fail(absl::Status status) {
  send_status_ = status;
  Abort(std::string(status.message()));
  return status;
}

void PushStream::Abort(const std::string& reason) {
  if (ended_by_us_) return;
  ended_by_us_ = true;
  stream_.Abort(reason);
  if (reader_.joinable()) reader_.join();
  (void)stream_.Finish();
}

absl::StatusOr<PushResult> PushStream::Commit() {
  if (!send_status_.ok()) return send_status_;
  if (ended_by_us_) return absl::FailedPreconditionError("the update was already committed");
  if (options_.tensors_total != 0 && added_ != options_.tensors_total) {
    // The bucket marked last would not be the last one.
    return Fail(absl::FailedPreconditionError(
        absl::StrCat("the push was declared to hold ", options_.tensors_total, " tensors; ", added_,
                     " were added before the commit")));
  }
  std::optional<PlannedBucket> open = planner_.Finish();
  SendHeld(/*last=*/!open.has_value());
  if (open) WSYNC_RETURN_IF_ERROR(SendBucket(*open, /*last=*/true));
  if (sequence_ == 0) {
    absl::Status empty = absl::InvalidArgumentError("nothing to push: no tensors");
    Abort(std::string(empty.message()));
    return empty;
  }
  bool daemon_ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    progress_.buckets_total = sequence_;
    daemon_ended = daemon_ended_;
  }
  if (daemon_ended) {
    stream_.CloseWrites();
  } else {
    stream_.Commit();
  }
  ended_by_us_ = true;
  if (reader_.joinable()) reader_.join();
  WSYNC_RETURN_IF_ERROR(stream_.Finish());
  if (!have_result_) return absl::InternalError("update ended without a result");
  PushResult out;
  out.update_id = result_.update_id();
  out.buckets = result_.buckets();
  out.bytes = result_.bytes();
  out.seconds = absl::ToDoubleSeconds(absl::Now() - t0_);
  // A wsyncd older than Timing sets only the deprecated fields, which every wsyncd still sets.
  v1::Timing t = result_.timing();
  if (!result_.has_timing()) {
    t.set_verify_seconds(result_.verify_seconds());
    t.set_idle_seconds(result_.idle_before_seconds());
    t.set_wire_seconds(result_.broadcast_seconds());
    t.set_answer_seconds(result_.answer_seconds());
    t.set_request_late_seconds(result_.request_late_seconds());
    t.set_first_launch_seconds(result_.first_launch_seconds());
    t.set_finish_seconds(result_.finish_seconds());
  }
  out.verify_seconds = t.verify_seconds();
  out.idle_seconds = t.idle_seconds();
  out.wire_seconds = t.wire_seconds();
  out.answer_seconds = t.answer_seconds();
  out.request_late_seconds = t.request_late_seconds();
  out.first_launch_seconds = t.first_launch_seconds();
  out.finish_seconds = t.finish_seconds();
  out.idle_before_seconds = out.idle_seconds;
  out.broadcast_seconds = out.wire_seconds;
  out.buckets_pulled = buckets_pulled_;
  out.buckets_read_in_place = result_.buckets_read_in_place();
  if (result_.has_wire_volume()) {
    out.has_wire_volume = true;
    out.wire_sent_bytes = result_.wire_volume().sent_bytes();
    out.wire_dense_bytes = result_.wire_volume().dense_bytes();
    out.changed_fraction = result_.wire_volume().changed_fraction();
    out.elements_compared = result_.wire_volume().elements_compared();
    out.elements_changed = result_.wire_volume().elements_changed();
  }
  out.bucket_rules = planner_.rules().Describe();
  for (const auto& e : result_.engines()) {
    out.engines.push_back(EngineResultView{
        e.engine(), absl::Status(static_cast<absl::StatusCode>(e.code()), e.message()),
        e.engine_version(), e.weights_check(), e.needs_full_version(),
        std::vector<std::string>(e.warnings().begin(), e.warnings().end()),
        std::vector<std::string>(e.relayed().begin(), e.relayed().end())});
  }
  return out;
}

}  // namespace wsync
