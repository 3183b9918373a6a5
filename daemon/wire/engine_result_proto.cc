#include "daemon/wire/engine_result_proto.h"

#include <string>

namespace wsync {

void EngineOutcomeToProto(const EngineOutcome& outcome, v1::EngineResult* out) {
  out->set_engine(outcome.engine);
  out->set_ok(outcome.status.ok());
  out->set_code(static_cast<int32_t>(outcome.status.code()));
  out->set_message(std::string(outcome.status.message()));
  out->set_engine_version(outcome.engine_version);
  out->set_weights_check(outcome.weights_check);
  out->set_needs_full_version(outcome.needs_full_version);
  for (const std::string& w : outcome.warnings) out->add_warnings(w);
  for (const std::string& r : outcome.relayed) out->add_relayed(r);
}

}  // namespace wsync
