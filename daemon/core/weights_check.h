#ifndef WSYNC_DAEMON_CORE_WEIGHTS_CHECK_H_
#define WSYNC_DAEMON_CORE_WEIGHTS_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/engine_adapter.h"

namespace wsync {

// What the engines' checksums after a commit say of each engine.
struct WeightsCheck {
  std::vector<std::string> notes;  // per engine, for EngineOutcome::weights_check
  std::vector<bool> differs;       // per engine: its weights are not the group's
  std::string error;               // "" when no engine differs
};

// Compares the engines of a group with each other by their own checkers' answers (`checksums`,
// one per engine, in endpoint order). Only engines of one TP size hold the same shards, so each
// TP size is compared on its own. Where the engines of a TP size disagree, the engines outside
// the one largest set of equal answers differ; with no single largest set, every engine of that
// size differs, since nothing says which holds the trainer's weights. An engine whose checker
// failed, that has none, or that listed no tensors is noted and neither agrees nor differs.
WeightsCheck CompareEngineWeights(const std::vector<EngineEndpoint>& engines,
                                  const std::vector<absl::StatusOr<WeightChecksums>>& checksums);

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_WEIGHTS_CHECK_H_
