#include "daemon/transport/ipc/ipc_bucket.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"

namespace wsync {

IpcBucket::IpcBucket(std::vector<EngineAdapter*> adapters,
                     std::vector<std::shared_ptr<UpdateChannel>> channels,
                     std::shared_ptr<IpcFormation> formation, absl::Time deadline,
                     FailureHook on_failure, std::shared_ptr<EngineDrops> drops)
    : adapters_(std::move(adapters)),
      channels_(std::move(channels)),
      formation_(std::move(formation)),
      deadline_(deadline),
      on_failure_(std::move(on_failure)),
      drops_(std::move(drops)),
      calls_(adapters_.size()),
      results_(adapters_.size()),
      skipped_(adapters_.size(), false) {}

std::unique_ptr<IpcBucket> IpcBucket::Start(
    const std::vector<EngineAdapter*>& adapters,
    const std::vector<std::shared_ptr<UpdateChannel>>& channels,
    const std::vector<EngineRequest>& requests, std::shared_ptr<IpcFormation> formation,
    absl::Time deadline, FailureHook on_failure, std::shared_ptr<EngineDrops> drops) {
  auto bucket = std::unique_ptr<IpcBucket>(new IpcBucket(
      adapters, channels, std::move(formation), deadline, std::move(on_failure), std::move(drops)));
  bucket->launch_status_ = bucket->Launch(requests);
  return bucket;
}

absl::Status IpcBucket::Launch(const std::vector<EngineRequest>& requests) {
  if (channels_.size() != adapters_.size() || requests.size() != adapters_.size()) {
    return absl::InternalError("one update channel and one request per engine expected");
  }
  if (formation_->latch.tripped()) {
    return absl::AbortedError(
        "an earlier bucket of this group failed; no bucket reaches its engines until the next "
        "update begins afresh");
  }
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (absl::Status why = drops_ != nullptr ? drops_->WhyDropped(i) : absl::OkStatus();
        !why.ok()) {
      skipped_[i] = true;
      results_[i] = why;
      continue;
    }
    auto call = channels_[i]->Post(requests[i].path, requests[i].json_body, deadline_);
    if (!call.ok()) {
      results_[i] = call.status();
      // Left out from here on where the quorum allows; the other engines still get the bucket.
      if (drops_ != nullptr && drops_->TryDrop({{i, call.status()}})) continue;
      return absl::Status(
          call.status().code(),
          absl::StrCat("engine ", adapters_[i]->endpoint().url, ": ", call.status().message()));
    }
    calls_[i] = *call;
  }
  return absl::OkStatus();
}

IpcBucket::~IpcBucket() {
  // Dropped unanswered: the engines may still be reading, and their answers no longer matter.
  if (!collected_) CancelAll("the bucket was dropped before its engines answered");
}

void IpcBucket::CancelAll(absl::string_view why) {
  for (const auto& channel : channels_) channel->Cancel(why);
}

absl::Status IpcBucket::Collect() {
  if (collected_) return combined_;
  collected_ = true;
  // Per engine: when and why it failed (an engine never written to failed at the launch).
  std::map<size_t, EngineAnswer> failed;
  std::vector<std::string> not_sent;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    if (skipped_[i]) continue;
    if (calls_[i] == nullptr) {
      // Not written: either it failed (results_ has why) or an earlier engine's write did.
      if (results_[i].ok()) {
        results_[i] =
            absl::CancelledError(absl::StrCat("request not sent: ", launch_status_.message()));
        not_sent.push_back(adapters_[i]->endpoint().url);
      } else {
        failed.emplace(i, EngineAnswer{results_[i], absl::InfinitePast()});
      }
      continue;
    }
    // An engine that never answered has its connection closed: its ranks may go on reading, but
    // wsyncd frees nothing on that account; the group fails and the slots are refilled only by a
    // later update.
    EngineAnswer answer = WaitEngineAnswer(*adapters_[i], *calls_[i], *channels_[i], deadline_);
    results_[i] = answer.status;
    answered_at_ = std::max(answered_at_, calls_[i]->ended_at());
    if (!answer.status.ok()) failed.emplace(i, std::move(answer));
  }
  if (drops_ != nullptr && !failed.empty() && not_sent.empty()) {
    // A quorum group goes on without the engines that failed, where enough remain. An engine an
    // earlier bucket dropped after this one's request went out is already left out: its answer
    // no longer matters.
    std::map<size_t, absl::Status> why;
    for (const auto& [i, answer] : failed) why.emplace(i, answer.status);
    if (drops_->TryDrop(why)) {
      for (const auto& [i, answer] : failed) {
        WSYNC_LOG(Warning, "IPC bucket: engine ", adapters_[i]->endpoint().url, ": ",
                  answer.status.message(), "; the update goes on without it");
      }
      failed.clear();
    }
  }
  if (failed.empty() && not_sent.empty()) return combined_ = absl::OkStatus();
  BucketFailures failures;
  for (const auto& [i, answer] : failed) {
    failures.Add(
        answer.failed_at, answer.status,
        absl::StrCat("engine ", adapters_[i]->endpoint().url, ": ", answer.status.message()));
  }
  if (!not_sent.empty()) failures.Note(absl::StrCat("not sent to ", absl::StrJoin(not_sent, ", ")));
  combined_ = failures.Combined(launch_status_);
  formation_->latch.Trip();
  if (on_failure_) on_failure_(combined_);
  return combined_;
}

absl::StatusOr<WireTiming> IpcBucket::WaitReusable() {
  absl::Status s = Collect();
  if (!s.ok()) return s;
  return WireTiming{};
}

absl::Status IpcBucket::WaitAnswered(std::vector<EngineOutcome>* outcomes) {
  absl::Status s = Collect();
  for (size_t i = 0; i < adapters_.size(); ++i) {
    outcomes->push_back(EngineOutcome{adapters_[i]->endpoint().url, results_[i]});
    outcomes->back().answer_seconds = AnswerSeconds(calls_[i].get());
  }
  return s;
}

absl::Time IpcBucket::requests_written_at() const {
  absl::Time last = absl::InfinitePast();
  for (size_t i = 0; i < calls_.size(); ++i) {
    if (skipped_[i]) continue;  // dropped from the update earlier: nothing to write
    if (calls_[i] == nullptr) return absl::InfinitePast();
    last = std::max(last, calls_[i]->written_at());
  }
  return last;
}

}  // namespace wsync
