// WeightGroup's weights check after a commit (weight_group.h).
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
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
  std::vector<absl::StatusOr<WeightChecksums>> sums(checked.size());
  OnEachEngine(checked, [&](EngineAdapter& a) {
    sums[std::find(checked.begin(), checked.end(), &a) - checked.begin()] = a.ChecksumWeights();
    return absl::OkStatus();
  });
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

}  // namespace wsync
