#include "daemon/core/bucket_transfer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace wsync {

BucketTransfer::BucketTransfer(std::vector<EngineAdapter*> adapters,
                               std::vector<std::shared_ptr<UpdateChannel>> channels,
                               RootCommunicator* comm, BucketManifest manifest,
                               std::string rank_map, std::shared_ptr<RequestGate> gate,
                               absl::Time deadline, FailureHook on_failure, Diagnosis diagnose)
    : adapters_(std::move(adapters)),
      channels_(std::move(channels)),
      comm_(comm),
      manifest_(std::move(manifest)),
      rank_map_(std::move(rank_map)),
      gate_(std::move(gate)),
      deadline_(deadline),
      on_failure_(std::move(on_failure)),
      diagnose_(std::move(diagnose)) {
  launch_->calls.resize(adapters_.size());
  launch_->not_written.resize(adapters_.size());
}

absl::StatusOr<std::unique_ptr<BucketTransfer>> BucketTransfer::Start(
    const std::vector<EngineAdapter*>& adapters,
    const std::vector<std::shared_ptr<UpdateChannel>>& channels, RootCommunicator* comm,
    SlotMemory& slot, const void* base, BucketManifest manifest, const std::string& group_name,
    std::string rank_map, std::shared_ptr<RequestGate> gate, std::shared_ptr<RequestGate> successor,
    absl::Time deadline, FailureHook on_failure, Diagnosis diagnose) {
  if (adapters.empty()) return absl::FailedPreconditionError("group has no engine");
  if (channels.size() != adapters.size()) {
    return absl::InternalError("one update channel per engine expected");
  }
  std::vector<BroadcastPiece> pieces = adapters.front()->BroadcastPieces(manifest);
  std::vector<EngineRequest> requests;
  for (EngineAdapter* a : adapters) requests.push_back(a->BucketRequest(manifest, group_name));
  auto transfer = std::unique_ptr<BucketTransfer>(
      new BucketTransfer(adapters, channels, comm, std::move(manifest), std::move(rank_map),
                         std::move(gate), deadline, std::move(on_failure), std::move(diagnose)));
  SlotMemory* from = &slot;
  transfer->gate_->OnDecided([launch = transfer->launch_, adapters, channels, comm, from, base,
                              pieces = std::move(pieces), requests = std::move(requests),
                              successor = std::move(successor),
                              deadline](const absl::Status& open) {
    absl::Status outcome;
    {
      std::lock_guard<std::mutex> lock(launch->mu);
      if (launch->dropped) {
        outcome = absl::CancelledError("the previous bucket's transfer was dropped");
      } else if (!open.ok()) {
        outcome = absl::Status(open.code(), absl::StrCat("not sent: ", open.message()));
      }
      // Requests first: the first broadcast of a communicator returns only once the engines join
      // it, which they do inside their requests.
      for (size_t i = 0; outcome.ok() && i < channels.size(); ++i) {
        auto call = channels[i]->Post(requests[i].path, requests[i].json_body, deadline);
        if (!call.ok()) {
          launch->not_written[i] = call.status();
          outcome = call.status();
          break;
        }
        launch->calls[i] = *call;
        (*call)->OnDone([comm, adapter = adapters[i]](const absl::StatusOr<HttpReply>& reply) {
          absl::Status s = reply.ok() ? adapter->CheckBucketReply(*reply) : reply.status();
          // This engine will never take the bucket's bytes: end the broadcast now rather than at
          // the deadline. (Cancelled calls belong to an update that already failed.)
          if (!s.ok() && s.code() != absl::StatusCode::kCancelled) comm->Abort(s.message());
        });
      }
      if (outcome.ok()) {
        auto ticket = base != nullptr ? comm->StartBroadcastFrom(*from, base, pieces, deadline)
                                      : comm->StartBroadcast(*from, pieces, deadline);
        if (ticket.ok()) {
          launch->ticket = *ticket;
        } else {
          outcome = ticket.status();
        }
      }
      // Engines that took a request would wait for bytes that never come.
      if (!outcome.ok() && open.ok() && !launch->dropped) comm->Abort(outcome.message());
      launch->status = outcome;
      launch->done = true;
      launch->cv.notify_all();
    }
    // Outside the lock: opening may launch the next bucket at once, in this thread.
    if (outcome.ok()) {
      successor->Open();
    } else {
      successor->Close(absl::AbortedError("an earlier bucket of this update failed"));
    }
  });
  return transfer;
}

BucketTransfer::~BucketTransfer() {
  bool launched;
  {
    std::lock_guard<std::mutex> lock(launch_->mu);
    launch_->dropped = true;
    launched = launch_->done && launch_->status.ok();
  }
  if (!waited_answers_) {
    // Requests whose broadcast may still go out cannot be dropped alone: the engines would read
    // the next bucket's bytes as this one's.
    if (launched && !waited_sent_) {
      comm_->Abort("bucket transfer dropped before its broadcast completed");
    }
    Cancel();
  }
}

void BucketTransfer::Cancel() {
  gate_->Close(absl::CancelledError("the bucket's broadcast failed"));
  for (const auto& channel : channels_) channel->Cancel("the bucket's broadcast failed");
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
  if (sent_.ok()) {
    auto timing = comm_->WaitBroadcast(ticket, deadline_);
    sent_ = timing.status();
    if (sent_.ok()) return timing;
  }
  // A deadline passed is the moment it failed; anything else was seen just now.
  sent_failed_at_ = sent_.code() == absl::StatusCode::kDeadlineExceeded ? deadline_ : absl::Now();
  return sent_;
}

absl::Time BucketTransfer::requests_written_at() const {
  std::lock_guard<std::mutex> lock(launch_->mu);
  absl::Time last = absl::InfinitePast();
  for (const auto& call : launch_->calls) {
    if (call == nullptr) return absl::InfinitePast();
    last = std::max(last, call->written_at());
  }
  return last;
}

absl::Status BucketTransfer::WaitAnswered(std::vector<EngineOutcome>* outcomes) {
  waited_answers_ = true;
  if (!waited_sent_) (void)WaitSent();
  // Without the broadcast the engines wait for bytes that never come.
  if (!sent_.ok()) Cancel();
  std::vector<std::shared_ptr<ChannelCall>> calls;
  std::vector<absl::Status> results;
  absl::Status launch_status;
  {
    std::lock_guard<std::mutex> lock(launch_->mu);
    calls = launch_->calls;
    results = launch_->not_written;
    launch_status = launch_->status;
  }
  // When each engine failed: its answer, or the deadline it never answered by. A request that
  // was never written failed first, at the launch.
  std::vector<absl::Time> failed_at(calls.size(), absl::InfinitePast());
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!results[i].ok()) continue;
    if (calls[i] == nullptr) {
      results[i] =
          absl::CancelledError(absl::StrCat("request not sent: ", launch_status.message()));
      continue;
    }
    auto reply = calls[i]->Wait(deadline_);
    if (!reply.ok() && reply.status().code() == absl::StatusCode::kDeadlineExceeded &&
        calls[i]->ended_at() == absl::InfinitePast()) {
      results[i] = absl::DeadlineExceededError(
          "no answer to the update request before the bucket deadline (engine hung?)");
      failed_at[i] = deadline_;
      Cancel();
    } else {
      results[i] = reply.ok() ? adapters_[i]->CheckBucketReply(*reply) : reply.status();
      failed_at[i] = calls[i]->ended_at();
    }
    answered_at_ = std::max(answered_at_, calls[i]->ended_at());
  }
  // The failures in the order they happened: the first caused the rest (an engine's error
  // aborts the collective, and an aborted collective fails the other engines' receives).
  struct Cause {
    absl::Time at;
    absl::Status status;
    std::string text;
  };
  std::vector<Cause> causes;
  std::vector<std::string> cancelled;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    outcomes->push_back(EngineOutcome{adapters_[i]->endpoint().url, results[i]});
    if (results[i].code() == absl::StatusCode::kCancelled) {
      // Still named: an engine that never answered is often the one that never joined.
      cancelled.push_back(adapters_[i]->endpoint().url);
    } else if (!results[i].ok()) {
      causes.push_back(
          Cause{failed_at[i], results[i],
                absl::StrCat("engine ", adapters_[i]->endpoint().url, ": ", results[i].message())});
    }
  }
  // An aborted broadcast is the echo of an engine's failure; report it only when nothing else
  // explains the failure.
  if (!sent_.ok() && (sent_.code() != absl::StatusCode::kAborted || causes.empty())) {
    causes.push_back(Cause{sent_failed_at_, sent_,
                           absl::StrCat("broadcast: ", sent_.message(), " [", rank_map_, "]")});
  }
  if (causes.empty() && cancelled.empty()) return absl::OkStatus();
  std::stable_sort(causes.begin(), causes.end(),
                   [](const Cause& a, const Cause& b) { return a.at < b.at; });
  std::vector<std::string> errors;
  for (const Cause& c : causes) errors.push_back(c.text);
  if (!cancelled.empty()) {
    errors.push_back(absl::StrCat("no answer yet from ", absl::StrJoin(cancelled, ", "),
                                  " when the broadcast failed"));
  }
  if (diagnose_) {
    // A rendezvous problem explains the rest (an engine waiting for a broadcast that never came).
    if (std::string report = diagnose_(); !report.empty()) errors.push_back(std::move(report));
  }
  // Only cancelled requests: no error code of their own to report, and an OK code here would pass
  // the failure off as success.
  absl::Status first = causes.empty() ? absl::CancelledError("") : causes.front().status;
  absl::Status failed(first.code(), absl::StrJoin(errors, "; "));
  if (on_failure_) on_failure_(failed);
  return failed;
}

}  // namespace wsync
