#ifndef WSYNC_DAEMON_ENGINES_WEIGHT_CHECKER_H_
#define WSYNC_DAEMON_ENGINES_WEIGHT_CHECKER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/engines/http_json.h"
#include "nlohmann/json.hpp"

namespace wsync {

// The engines' own weight checkers (docs/engines/sglang.md, "The weight checker"), asked with
// {"action": "checksum"} after a commit. Their keys are engine-internal tensor names (fused
// projections, TP shards), so the maps compare engines of one TP layout with each other, never
// an engine with the trainer's tensors. Keys and values are kept bounded and printable; an answer
// of the wrong shape is FAILED_PRECONDITION naming the URL and route.

// SGLang POST /weights_checker: {success, message, ranks: [{checksums: {name: hex}, ...}],
// per_engine_checksum?}. Each rank's tensors are keyed "tp<i>/<name>"; with no ranks, the engine's
// one checksum is keyed "engine".
absl::StatusOr<WeightChecksums> SglangWeightChecksums(const nlohmann::json& answer,
                                                      const std::string& url);

// vLLM POST /weight_checker: {"checksums": {"dp0:pp0:pcp0:tp0:ep0:<name>": sha256}}, its keys
// already naming the rank.
absl::StatusOr<WeightChecksums> VllmWeightChecksums(const nlohmann::json& answer,
                                                    const std::string& url);

// POSTs {"action": "checksum"} to the engine's checker route and reads the answer as that engine
// writes it; UNIMPLEMENTED where the build has no such route (404).
absl::StatusOr<WeightChecksums> AskSglangWeightChecker(const EngineHttp& http,
                                                       const std::string& url,
                                                       absl::Duration timeout);
absl::StatusOr<WeightChecksums> AskVllmWeightChecker(const EngineHttp& http, const std::string& url,
                                                     absl::Duration timeout);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_WEIGHT_CHECKER_H_
