// WeightGroup's commit (weight_group.h): FinishUpdate, the steps it takes, and the weights check
// after it. The rule of who holds the version is PlanCommit (commit_verdict.h); what is here acts
// on it.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "daemon/core/commit_verdict.h"
#include "daemon/core/fan_out.h"
#include "daemon/core/peer_text.h"
#include "daemon/core/weight_group.h"

namespace wsync {

WeightGroup::CommittedWeights WeightGroup::CheckCommittedWeights(
    const UpdateInfo& update, const std::vector<size_t>& committed,
    std::vector<EngineOutcome>* outcomes, size_t first_outcome) {
  CommittedWeights out;
  out.differs.assign(adapters_.size(), false);
  WeightsCheck& check = out.check;
  std::vector<bool>& differs = out.differs;
  bool& differing_serves = out.differing_serves;
  const std::vector<EngineAdapter*> checked = AdaptersAt(committed);
  const std::vector<absl::StatusOr<WeightChecksums>> sums =
      FanOut(checked.size(), [&](size_t k) { return checked[k]->ChecksumWeights(); });
  std::vector<EngineEndpoint> endpoints;
  for (EngineAdapter* a : checked) endpoints.push_back(a->endpoint());
  check = CompareEngineWeights(endpoints, sums);
  std::vector<EngineAdapter*> differing;
  for (size_t k = 0; k < committed.size(); ++k) {
    const size_t i = committed[k];
    (*outcomes)[first_outcome + i].weights_check = check.notes[k];
    if (!check.differs[k]) continue;
    differs[i] = true;
    (*outcomes)[first_outcome + i].status = absl::DataLossError(check.notes[k]);
    differing.push_back(adapter_ptrs_[i]);
  }
  // An engine that differs must not serve what it holds: paused, it waits for a full version.
  // One that cannot be paused is serving them: said in its outcome and in the update's error.
  const std::vector<absl::Status> paused =
      OnEachEngine(differing, [](EngineAdapter& a) { return a.PauseGeneration(); });
  for (size_t j = 0, k = 0; k < committed.size(); ++k) {
    if (!check.differs[k]) continue;
    const size_t i = committed[k];
    const absl::Status& pause = paused[j++];
    if (pause.ok()) continue;
    check.notes[k] = absl::StrCat(
        check.notes[k], "; pausing it failed, so it still serves them: ", pause.message());
    (*outcomes)[first_outcome + i].weights_check = check.notes[k];
    (*outcomes)[first_outcome + i].status = absl::DataLossError(check.notes[k]);
    absl::StrAppend(&check.error, "; engine ", adapters_[i]->endpoint().url,
                    ": pausing it failed, so it still serves them");
    differing_serves = true;
  }
  if (std::all_of(check.notes.begin(), check.notes.end(),
                  [](const std::string& note) { return absl::StartsWith(note, "not checked"); })) {
    WSYNC_LOG(Warning, "group ", spec_.name, ": weights check after '", update.version,
              "' compared no engine: ", absl::StrJoin(check.notes, "; "));
  }
  return out;
}

EngineOutcome WeightGroup::OutcomeOf(size_t i, absl::Status status) const {
  return EngineOutcome{adapters_[i]->endpoint().url, std::move(status),
                       adapters_[i]->probed_version(), ""};
}

std::vector<absl::Status> WeightGroup::CommitOnEngines(const UpdateInfo& update) {
  // Those the update went on without (set aside before the first bucket, or dropped by the
  // transport after a failed one) are not asked to commit.
  std::vector<absl::Status> results(adapters_.size());
  std::vector<size_t> finishers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Engines the transport dropped mid-update: each may hold part of this version.
    membership_.NoteDropped(transport_->DroppedEngines());
    for (size_t i = 0; i < adapters_.size(); ++i) {
      const absl::Status* aside = membership_.SetAsideWhy(i);
      if (membership_.IsMember(i) && aside == nullptr) {
        finishers.push_back(i);
        continue;
      }
      const absl::Status why =
          aside != nullptr ? *aside : absl::UnavailableError("not in the group's formation");
      results[i] =
          absl::Status(why.code(), absl::StrCat("left out of this update: ", why.message()));
    }
  }
  const std::vector<absl::Status> finished =
      OnEachEngine(AdaptersAt(finishers), [&](EngineAdapter& a) { return a.FinishUpdate(update); });
  for (size_t k = 0; k < finishers.size(); ++k) results[finishers[k]] = finished[k];
  return results;
}

void WeightGroup::PauseMissed(const std::vector<size_t>& missed,
                              std::vector<absl::Status>* results) {
  const std::vector<absl::Status> paused =
      OnEachEngine(AdaptersAt(missed), [](EngineAdapter& a) { return a.PauseGeneration(); });
  for (size_t k = 0; k < missed.size(); ++k) {
    if (paused[k].ok()) continue;
    // Most often it is down; if not, it serves an older version than the group's.
    absl::Status& result = (*results)[missed[k]];
    result = absl::Status(
        result.code(),
        absl::StrCat(result.message(), "; pausing it failed too: ", paused[k].message()));
  }
}

void WeightGroup::PausePartial(const UpdateInfo& update, const std::vector<size_t>& partial,
                               const std::vector<absl::Status>& results, size_t committed) {
  const std::vector<absl::Status> paused = OnEachEngine(AdaptersAt(partial), [](EngineAdapter& a) {
    a.AbandonUpdate();
    return a.PauseGeneration();
  });
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t k = 0; k < partial.size(); ++k) {
    const size_t i = partial[k];
    std::string why =
        results[i].ok()
            ? absl::StrCat("it committed version '", update.version, "' of update ",
                           update.update_id, ", which did not land on the group (", committed,
                           " of ", adapters_.size(),
                           " engines committed): paused so that the group does not serve two "
                           "versions")
            : absl::StrCat("update ", update.update_id, " to version '", update.version,
                           "' reached it and did not commit: it may hold part of it (",
                           SanitizePeerText(results[i].message()), ")");
    if (!paused[k].ok()) absl::StrAppend(&why, "; pausing it failed: ", paused[k].message());
    MarkPartialLocked(i, why, nullptr);
  }
}

absl::Status WeightGroup::FinishUpdate(const UpdateInfo& update, absl::Time data_deadline,
                                       std::vector<EngineOutcome>* outcomes) {
  // The data path ends first: an engine records the version only once its weights are whole.
  if (absl::Status s = transport_->FinishBuckets(data_deadline); !s.ok()) {
    for (size_t i = 0; i < adapters_.size(); ++i) outcomes->push_back(OutcomeOf(i, s));
    MarkBroken(s);
    AbortUpdate(std::string(s.message()), outcomes);
    return s;
  }
  std::vector<absl::Status> results = CommitOnEngines(update);
  const size_t first_outcome = outcomes->size();
  for (size_t i = 0; i < adapters_.size(); ++i) {
    outcomes->push_back(OutcomeOf(i, results[i]));
    // A label that did not land fails nothing: the engine holds the version. Said in the result,
    // the log and wsync_engine_warnings_total.
    outcomes->back().warnings = adapters_[i]->TakeCommitWarnings();
    outcomes->back().relayed = adapters_[i]->TakeRelayedOutcomes();
    for (const std::string& w : outcomes->back().warnings) {
      WSYNC_LOG(Warning, "group ", spec_.name, ": engine ", adapters_[i]->endpoint().url,
                " committed version '", update.version, "' with a warning: ", w);
    }
  }
  std::vector<size_t> committed;
  std::vector<EngineCommitFacts> facts(adapters_.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < adapters_.size(); ++i) {
      const std::string& url = adapters_[i]->endpoint().url;
      if (results[i].ok()) committed.push_back(i);
      facts[i].committed = results[i].ok();
      facts[i].reached = reached_.count(url) != 0;
      facts[i].waiting = needs_full_.count(url) != 0;
    }
  }
  // All or nothing, unless the group's quorum says how many must commit (PlanCommit).
  CommitPlan plan = PlanCommit(facts, engines_needed());
  const bool commit_ok = plan.commit_ok;
  // The engines' own checksums, compared while the update still holds the group (so no other
  // update pauses the engines under the checkers) and after they resumed (vLLM's checker
  // refuses a paused engine). Only engines that committed are compared.
  CommittedWeights weights;
  weights.differs.assign(adapters_.size(), false);
  if (spec_.check_weights && commit_ok) {
    weights = CheckCommittedWeights(update, committed, outcomes, first_outcome);
  }
  const WeightsCheck& check = weights.check;
  // The engines that hold the version: committed, and (with the check) not differing.
  for (size_t i = 0; i < adapters_.size(); ++i) facts[i].differs = weights.differs[i];
  plan = PlanCommit(facts, engines_needed());
  const bool landed = CommitLanded(plan, !check.error.empty(), quorum_group(), engines_needed(),
                                   weights.differing_serves);
  // A quorum group's version landed without some engines: they must not serve what they hold
  // (an older version, or part of this one), so each is paused where it answers and waits for a
  // full version.
  if (commit_ok) PauseMissed(plan.missed, &results);
  std::vector<std::string> errors;
  absl::Status first;
  for (size_t i = 0; i < adapters_.size(); ++i) {
    if (results[i].ok()) continue;
    errors.push_back(absl::StrCat(adapters_[i]->endpoint().url, ": ", results[i].message()));
    if (first.ok()) first = results[i];
    // A failed pause is part of its outcome; the weights check's verdict stays where it is.
    if (commit_ok) (*outcomes)[first_outcome + i].status = results[i];
  }
  // An update that failed at the commit: an engine it reached that did not commit may hold part
  // of this version, and one that committed holds a version the group did not take (it would
  // serve another version than the others), so both stay paused and wait for a full one; an
  // engine it never reached (set aside before any bucket) holds the group's version whole and
  // resumes.
  if (!commit_ok) PausePartial(update, plan.partial, results, committed.size());
  OnEachEngine(AdaptersAt(plan.resume), [](EngineAdapter& a) { return a.ResumeGeneration(); });
  std::lock_guard<std::mutex> lock(mu_);
  transport_->EndUpdate("the update finished");
  update_open_ = false;
  if (state_ == GroupState::kUpdating) state_ = GroupState::kReady;
  ++updates_;
  // A complete update landed on the engines that finished it: they hold one version again.
  for (size_t i : plan.holding) needs_full_.erase(adapters_[i]->endpoint().url);
  for (size_t i = 0; i < adapters_.size(); ++i) {
    if (!weights.differs[i]) continue;
    needs_full_[adapters_[i]->endpoint().url] =
        absl::StrCat("after version '", update.version, "' its weights ",
                     (*outcomes)[first_outcome + i].weights_check);
  }
  std::string quorum_note;
  if (commit_ok && !plan.missed.empty()) {
    quorum_note =
        absl::StrCat("version '", update.version, "' committed on ", plan.holding.size(), " of ",
                     adapters_.size(), " engines (quorum ", engines_needed(), ")");
    for (size_t i : plan.missed) {
      needs_full_[adapters_[i]->endpoint().url] =
          absl::StrCat("missed version '", update.version, "': ", results[i].message());
    }
    WSYNC_LOG(Warning, "group ", spec_.name, ": ", quorum_note, "; without ",
              absl::StrJoin(errors, "; "));
  }
  open_update_ = UpdateInfo{};
  membership_.ClearSetAside();
  if (commit_ok) last_version_ = update.version;
  reached_.clear();
  for (size_t i = 0; i < adapters_.size(); ++i) {
    auto waiting = needs_full_.find(adapters_[i]->endpoint().url);
    if (waiting != needs_full_.end()) {
      (*outcomes)[first_outcome + i].needs_full_version = waiting->second;
    }
  }
  if (absl::Status s = PersistLocked(); !s.ok()) WSYNC_LOG(Warning, s.message());
  if (!commit_ok) {
    error_ = absl::StrJoin(errors, "; ");
    if (quorum_group()) {
      return absl::Status(
          first.code(),
          absl::StrCat("commit failed: ", committed.size(), " of ", adapters_.size(),
                       " engines committed, quorum ", engines_needed(), "; ", error_));
    }
    return absl::Status(first.code(), absl::StrCat("commit failed on ", error_));
  }
  if (!check.error.empty()) {
    error_ = check.error;
    WSYNC_LOG(Warning, "group ", spec_.name, ": weights check after '", update.version,
              "': ", check.error);
    if (!landed) {
      return absl::DataLossError(absl::StrCat("the engines' weights differ after version '",
                                              update.version, "': ", check.error,
                                              "; push the whole version again"));
    }
  }
  if (!quorum_note.empty()) {
    error_ = absl::StrCat(quorum_note, "; without ", absl::StrJoin(errors, "; "));
  }
  return absl::OkStatus();
}

}  // namespace wsync
