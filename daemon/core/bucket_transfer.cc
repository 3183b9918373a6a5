#include "daemon/core/bucket_transfer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace wsync {

BucketTransfer::BucketTransfer(std::vector<EngineAdapter*> adapters, RootCommunicator* comm,
                               BucketManifest manifest, std::string rank_map,
                               std::shared_ptr<RequestGate> gate, absl::Time deadline,
                               FailureHook on_failure, Diagnosis diagnose)
    : adapters_(std::move(adapters)),
      comm_(comm),
      manifest_(std::move(manifest)),
      rank_map_(std::move(rank_map)),
      gate_(std::move(gate)),
      deadline_(deadline),
      on_failure_(std::move(on_failure)),
      diagnose_(std::move(diagnose)),
      results_(adapters_.size()),
      answer_times_(adapters_.size(), absl::InfinitePast()) {
  for (size_t i = 0; i < adapters_.size(); ++i)
    controls_.push_back(std::make_unique<HttpCallControl>());
}

absl::StatusOr<std::unique_ptr<BucketTransfer>> BucketTransfer::Start(
    const std::vector<EngineAdapter*>& adapters, RootCommunicator* comm, SlotMemory& slot,
    const void* base, BucketManifest manifest, const std::string& group_name, std::string rank_map,
    std::shared_ptr<RequestGate> gate, absl::Time deadline, FailureHook on_failure,
    Diagnosis diagnose) {
  if (adapters.empty()) return absl::FailedPreconditionError("group has no engine");
  std::vector<BroadcastPiece> pieces = adapters.front()->BroadcastPieces(manifest);
  auto transfer = std::unique_ptr<BucketTransfer>(
      new BucketTransfer(adapters, comm, std::move(manifest), std::move(rank_map), std::move(gate),
                         deadline, std::move(on_failure), std::move(diagnose)));
  // Requests first: the first broadcast of a communicator returns only once the engines join it,
  // which they do inside their requests.
  transfer->PostRequests(group_name);
  SlotMemory* from = &slot;
  transfer->gate_->OnDecided([launch = transfer->launch_, comm, from, base,
                              pieces = std::move(pieces), deadline](const absl::Status& open) {
    std::lock_guard<std::mutex> lock(launch->mu);
    if (launch->dropped) return;
    if (!open.ok()) {
      launch->status = absl::Status(open.code(), absl::StrCat("not sent: ", open.message()));
    } else if (auto ticket = base != nullptr
                                 ? comm->StartBroadcastFrom(*from, base, pieces, deadline)
                                 : comm->StartBroadcast(*from, pieces, deadline);
               ticket.ok()) {
      launch->ticket = *ticket;
    } else {
      comm->Abort(ticket.status().message());
      launch->status = ticket.status();
    }
    launch->done = true;
    launch->cv.notify_all();
  });
  return transfer;
}

BucketTransfer::~BucketTransfer() {
  {
    std::lock_guard<std::mutex> lock(launch_->mu);
    launch_->dropped = true;
  }
  if (!threads_.empty()) {
    // Requests whose broadcast may still go out cannot be dropped alone: the engines would read
    // the next bucket's bytes as this one's.
    if (!waited_sent_) comm_->Abort("bucket transfer dropped before its broadcast completed");
    Cancel();
  }
  JoinRequests();
}

void BucketTransfer::PostRequests(const std::string& group_name) {
  for (size_t i = 0; i < adapters_.size(); ++i) {
    threads_.emplace_back([this, i, group_name] {
      if (absl::Status open = gate_->Wait(deadline_); !open.ok()) {
        // This bucket will never go out. Aborting also ends a predecessor that is stuck (the
        // reason, when the gate was never decided).
        results_[i] = absl::CancelledError(absl::StrCat("request not sent: ", open.message()));
        controls_[i]->Cancel();
        comm_->Abort(results_[i].message());
        return;
      }
      results_[i] = adapters_[i]->PostBucket(manifest_, group_name, deadline_, controls_[i].get());
      answer_times_[i] = absl::Now();
      if (!results_[i].ok() && !controls_[i]->cancelled()) comm_->Abort(results_[i].message());
    });
  }
}

void BucketTransfer::JoinRequests() {
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void BucketTransfer::Cancel() {
  gate_->Close(absl::CancelledError("the bucket's broadcast failed"));
  for (auto& c : controls_) c->Cancel();
}

absl::StatusOr<BroadcastTiming> BucketTransfer::WaitSent() {
  if (waited_sent_) {
    if (!sent_.ok()) return sent_;
    return absl::FailedPreconditionError("WaitSent called twice");
  }
  waited_sent_ = true;
  uint64_t ticket;
  {
    std::unique_lock<std::mutex> lock(launch_->mu);
    launch_->cv.wait_until(lock, absl::ToChronoTime(deadline_), [&] { return launch_->done; });
    if (!launch_->done) {
      sent_ = absl::DeadlineExceededError(
          "never sent: the previous bucket never reached its engines before this one's deadline");
    } else {
      sent_ = launch_->status;
    }
    ticket = launch_->ticket;
  }
  if (!sent_.ok()) return sent_;
  auto timing = comm_->WaitBroadcast(ticket, deadline_);
  sent_ = timing.status();
  return timing;
}

bool BucketTransfer::WaitRequestsWritten() {
  bool all = true;
  for (auto& c : controls_) all = c->WaitWritten(deadline_) && all;
  return all;
}

absl::Time BucketTransfer::requests_written_at() const {
  absl::Time last = absl::InfinitePast();
  for (const auto& c : controls_) last = std::max(last, c->written_at());
  return last;
}

absl::Status BucketTransfer::WaitAnswered(std::vector<EngineOutcome>* outcomes) {
  if (!waited_sent_) (void)WaitSent();
  // Without the broadcast the engines wait for bytes that never come.
  if (!sent_.ok()) Cancel();
  JoinRequests();
  for (absl::Time t : answer_times_) answered_at_ = std::max(answered_at_, t);
  std::vector<std::string> errors;
  std::vector<std::string> cancelled;
  absl::Status first;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    outcomes->push_back(EngineOutcome{adapters_[i]->endpoint().url, results_[i]});
    if (results_[i].code() == absl::StatusCode::kCancelled) {
      // Still named: an engine that never answered is often the one that never joined.
      cancelled.push_back(adapters_[i]->endpoint().url);
    } else if (!results_[i].ok()) {
      errors.push_back(
          absl::StrCat("engine ", adapters_[i]->endpoint().url, ": ", results_[i].message()));
      if (first.ok()) first = results_[i];
    }
  }
  if (!cancelled.empty()) {
    errors.push_back(absl::StrCat("no answer yet from ", absl::StrJoin(cancelled, ", "),
                                  " when the broadcast failed"));
  }
  // An aborted broadcast is the echo of an engine's failure; report it only when nothing else
  // explains the failure.
  if (!sent_.ok() && (sent_.code() != absl::StatusCode::kAborted || errors.empty())) {
    errors.push_back(absl::StrCat("broadcast: ", sent_.message(), " [", rank_map_, "]"));
    if (first.ok()) first = sent_;
  }
  if (errors.empty()) return absl::OkStatus();
  if (diagnose_) {
    // A rendezvous problem explains the rest (an engine waiting for a broadcast that never came).
    if (std::string report = diagnose_(); !report.empty()) errors.push_back(std::move(report));
  }
  // Only cancelled requests and an aborted broadcast: no error code of its own to report, and an
  // OK code here would pass the failure off as success.
  if (first.ok()) first = sent_.ok() ? absl::CancelledError("") : sent_;
  absl::Status failed(first.code(), absl::StrJoin(errors, "; "));
  if (on_failure_) on_failure_(failed);
  return failed;
}

}  // namespace wsync
