#include "daemon/transport/ipc/ipc_bucket.h"

#include <algorithm>

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
  if (formation_->failed) {
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
  struct Cause {
    absl::Time at;
    absl::Status status;
    std::string text;
    size_t engine;
  };
  std::vector<Cause> causes;
  std::vector<std::string> not_sent;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    const std::string& url = adapters_[i]->endpoint().url;
    if (skipped_[i]) continue;
    if (calls_[i] == nullptr) {
      // Not written: either it failed (results_ has why) or an earlier engine's write did.
      if (results_[i].ok()) {
        results_[i] =
            absl::CancelledError(absl::StrCat("request not sent: ", launch_status_.message()));
        not_sent.push_back(url);
      } else {
        causes.push_back(Cause{absl::InfinitePast(), results_[i],
                               absl::StrCat("engine ", url, ": ", results_[i].message()), i});
      }
      continue;
    }
    auto reply = calls_[i]->Wait(deadline_);
    absl::Time at = calls_[i]->ended_at();
    if (!reply.ok() && reply.status().code() == absl::StatusCode::kDeadlineExceeded &&
        at == absl::InfinitePast()) {
      results_[i] = absl::DeadlineExceededError(
          "no answer to the update request before the bucket deadline (engine hung?)");
      at = deadline_;
      // Its connection is closed: the engine's ranks may go on reading, but wsyncd frees nothing
      // on that account; the group fails and the slots are refilled only by a later update.
      channels_[i]->Cancel("the engine did not answer before the bucket deadline");
    } else {
      results_[i] = reply.ok() ? adapters_[i]->CheckBucketReply(*reply) : reply.status();
    }
    answered_at_ = std::max(answered_at_, calls_[i]->ended_at());
    if (!results_[i].ok()) {
      causes.push_back(
          Cause{at, results_[i], absl::StrCat("engine ", url, ": ", results_[i].message()), i});
    }
  }
  if (drops_ != nullptr && !causes.empty() && not_sent.empty()) {
    // A quorum group goes on without the engines that failed, where enough remain. An engine an
    // earlier bucket dropped after this one's request went out is already left out: its answer
    // no longer matters.
    std::map<size_t, absl::Status> failed;
    for (const Cause& c : causes) failed.emplace(c.engine, c.status);
    if (drops_->TryDrop(failed)) {
      for (const Cause& c : causes) {
        WSYNC_LOG(Warning, "IPC bucket: ", c.text, "; the update goes on without it");
      }
      causes.clear();
    }
  }
  if (causes.empty() && not_sent.empty()) return combined_ = absl::OkStatus();
  std::stable_sort(causes.begin(), causes.end(),
                   [](const Cause& a, const Cause& b) { return a.at < b.at; });
  std::vector<std::string> errors;
  for (const Cause& c : causes) errors.push_back(c.text);
  if (!not_sent.empty()) {
    errors.push_back(absl::StrCat("not sent to ", absl::StrJoin(not_sent, ", ")));
  }
  const absl::Status first = causes.empty() ? launch_status_ : causes.front().status;
  combined_ = absl::Status(first.code(), absl::StrJoin(errors, "; "));
  formation_->failed = true;
  if (on_failure_) on_failure_(combined_);
  return combined_;
}

absl::StatusOr<BroadcastTiming> IpcBucket::WaitReusable() {
  absl::Status s = Collect();
  if (!s.ok()) return s;
  return BroadcastTiming{};
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
