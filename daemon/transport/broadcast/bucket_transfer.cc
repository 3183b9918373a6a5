#include "daemon/transport/broadcast/bucket_transfer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "daemon/core/engine_group_name.h"
#include "daemon/transport/broadcast/broadcast_binding.h"

namespace wsync {

BucketTransfer::BucketTransfer(std::vector<EngineAdapter*> adapters,
                               std::vector<std::shared_ptr<UpdateChannel>> channels,
                               std::shared_ptr<FormedCollective> collective, std::string rank_map,
                               absl::Time deadline, FailureHook on_failure, Diagnosis diagnose)
    : adapters_(std::move(adapters)),
      channels_(std::move(channels)),
      collective_(std::move(collective)),
      comm_(collective_->comm.get()),
      rank_map_(std::move(rank_map)),
      deadline_(deadline),
      on_failure_(std::move(on_failure)),
      diagnose_(std::move(diagnose)),
      calls_(adapters_.size()),
      not_written_(adapters_.size()) {}

absl::StatusOr<std::unique_ptr<BucketTransfer>> BucketTransfer::Start(
    const std::vector<EngineAdapter*>& adapters,
    const std::vector<std::shared_ptr<UpdateChannel>>& channels,
    std::shared_ptr<FormedCollective> collective, const BucketSource& source,
    const BucketManifest& manifest, const BucketContext& context, const std::string& group_name,
    std::string rank_map, absl::Time deadline, FailureHook on_failure, Diagnosis diagnose) {
  if (adapters.empty()) return absl::FailedPreconditionError("group has no engine");
  if (channels.size() != adapters.size()) {
    return absl::InternalError("one update channel per engine expected");
  }
  if (source.slot == nullptr) return absl::InternalError("a bucket source without a slot");
  // Built before anything is written: a bucket an adapter cannot describe reaches no engine.
  std::vector<EngineRequest> requests;
  std::vector<BroadcastBinding*> bindings;
  for (EngineAdapter* a : adapters) {
    WSYNC_ASSIGN_OR_RETURN(BroadcastBinding * binding, BroadcastBindingOf(*a));
    auto request = binding->BucketRequest(manifest, group_name, context);
    if (!request.ok()) return request.status();
    requests.push_back(std::move(*request));
    bindings.push_back(binding);
  }
  auto pieces = bindings.front()->Pieces(manifest);
  if (!pieces.ok()) return pieces.status();
  auto transfer = std::unique_ptr<BucketTransfer>(
      new BucketTransfer(adapters, channels, std::move(collective), std::move(rank_map), deadline,
                         std::move(on_failure), std::move(diagnose)));
  transfer->launch_status_ = transfer->Launch(source, *pieces, requests);
  // Engines that took a request would wait for bytes that never come.
  if (!transfer->launch_status_.ok()) {
    transfer->collective_->Fail(transfer->launch_status_.message());
  }
  return transfer;
}

absl::Status BucketTransfer::Launch(const BucketSource& source,
                                    const std::vector<BroadcastPiece>& pieces,
                                    const std::vector<EngineRequest>& requests) {
  if (collective_->latch.tripped()) {
    return absl::AbortedError(
        "an earlier bucket of this group failed; no bucket reaches its engines until it forms "
        "again");
  }
  // Requests first: the first broadcast of a communicator returns only once the engines join it,
  // which they do inside their requests.
  for (size_t i = 0; i < channels_.size(); ++i) {
    auto call = channels_[i]->Post(requests[i].path, requests[i].json_body, deadline_);
    if (!call.ok()) {
      not_written_[i] = call.status();
      return call.status();
    }
    calls_[i] = *call;
    // Weak: a call's callback may outlive the group's formation.
    (*call)->OnDone([weak = std::weak_ptr<FormedCollective>(collective_),
                     adapter = adapters_[i]](const absl::StatusOr<HttpReply>& reply) {
      const absl::Status s = ReadEngineAnswer(*adapter, reply);
      // This engine will never take the bucket's bytes: end the broadcast now rather than at the
      // deadline, and launch nothing more. (Cancelled calls belong to an update that already
      // failed.)
      if (s.ok() || s.code() == absl::StatusCode::kCancelled) return;
      if (auto collective = weak.lock()) collective->Fail(s.message());
    });
  }
  auto ticket = source.base != nullptr
                    ? comm_->StartBroadcastFrom(*source.slot, source.base, pieces, deadline_)
                    : comm_->StartBroadcast(*source.slot, pieces, deadline_);
  if (!ticket.ok()) return ticket.status();
  ticket_ = *ticket;
  return absl::OkStatus();
}

BucketTransfer::~BucketTransfer() {
  if (!waited_answers_) {
    // Requests whose broadcast may still go out cannot be dropped alone: the engines would read
    // the next bucket's bytes as this one's.
    if (launched() && !waited_sent_) {
      comm_->Abort("bucket transfer dropped before its broadcast completed");
    }
    Cancel();
  }
}

void BucketTransfer::Cancel() {
  for (const auto& channel : channels_) channel->Cancel("the bucket's broadcast failed");
}

absl::StatusOr<WireTiming> BucketTransfer::WaitReusable() {
  if (waited_sent_) {
    if (!sent_.ok()) return sent_;
    return absl::FailedPreconditionError("WaitReusable called twice");
  }
  waited_sent_ = true;
  sent_ = launch_status_;
  if (sent_.ok()) {
    auto timing = comm_->WaitBroadcast(ticket_, deadline_);
    sent_ = timing.status();
    if (sent_.ok()) return timing;
  }
  // A deadline passed is the moment it failed; anything else was seen just now.
  sent_failed_at_ = sent_.code() == absl::StatusCode::kDeadlineExceeded ? deadline_ : absl::Now();
  return sent_;
}

absl::Time BucketTransfer::requests_written_at() const {
  absl::Time last = absl::InfinitePast();
  for (const auto& call : calls_) {
    if (call == nullptr) return absl::InfinitePast();
    last = std::max(last, call->written_at());
  }
  return last;
}

absl::Status BucketTransfer::WaitAnswered(std::vector<EngineOutcome>* outcomes) {
  waited_answers_ = true;
  if (!waited_sent_) (void)WaitReusable();
  // Without the broadcast the engines wait for bytes that never come.
  if (!sent_.ok()) Cancel();
  std::vector<absl::Status> results = not_written_;
  // When each engine failed: its answer, or the deadline it never answered by. A request that
  // was never written failed first, at the launch.
  std::vector<absl::Time> failed_at(calls_.size(), absl::InfinitePast());
  for (size_t i = 0; i < calls_.size(); ++i) {
    if (!results[i].ok()) continue;
    if (calls_[i] == nullptr) {
      results[i] =
          absl::CancelledError(absl::StrCat("request not sent: ", launch_status_.message()));
      continue;
    }
    EngineAnswer answer = WaitEngineAnswer(*adapters_[i], *calls_[i], *channels_[i], deadline_);
    // An engine that never answered keeps the others waiting for bytes that never come.
    if (answer.status.code() == absl::StatusCode::kDeadlineExceeded) Cancel();
    results[i] = std::move(answer.status);
    failed_at[i] = answer.failed_at;
    answered_at_ = std::max(answered_at_, calls_[i]->ended_at());
  }
  BucketFailures failures;
  std::vector<std::string> cancelled;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    outcomes->push_back(EngineOutcome{adapters_[i]->endpoint().url, results[i]});
    outcomes->back().answer_seconds = AnswerSeconds(calls_[i].get());
    if (results[i].code() == absl::StatusCode::kCancelled) {
      // Still named: an engine that never answered is often the one that never joined.
      cancelled.push_back(adapters_[i]->endpoint().url);
    } else if (!results[i].ok()) {
      failures.Add(
          failed_at[i], results[i],
          absl::StrCat("engine ", adapters_[i]->endpoint().url, ": ", results[i].message()));
    }
  }
  // An aborted broadcast is the echo of an engine's failure; report it only when nothing else
  // explains the failure.
  if (!sent_.ok() && (sent_.code() != absl::StatusCode::kAborted || !failures.has_causes())) {
    failures.Add(sent_failed_at_, sent_,
                 absl::StrCat("broadcast: ", sent_.message(), " [", rank_map_, "]"));
  }
  if (failures.empty() && cancelled.empty()) return absl::OkStatus();
  if (!cancelled.empty()) {
    failures.Note(absl::StrCat("no answer yet from ", absl::StrJoin(cancelled, ", "),
                               " when the broadcast failed"));
  }
  if (diagnose_) {
    // A rendezvous problem explains the rest (an engine waiting for a broadcast that never came).
    if (std::string report = diagnose_(); !report.empty()) failures.Note(std::move(report));
  }
  // Only cancelled requests: no error code of their own to report, and an OK code here would pass
  // the failure off as success.
  absl::Status failed = failures.Combined(absl::CancelledError(""));
  collective_->latch.Trip();
  if (on_failure_) on_failure_(failed);
  return failed;
}

}  // namespace wsync
