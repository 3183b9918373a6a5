#ifndef WSYNC_DAEMON_WIRE_ENGINE_RESULT_PROTO_H_
#define WSYNC_DAEMON_WIRE_ENGINE_RESULT_PROTO_H_

#include "daemon/core/engine_adapter.h"
#include "wsync/v1/trainer.pb.h"

namespace wsync {

// One engine's outcome of an update as the wire carries it: to the trainer in its result, and
// from a relay's downstream to its upstream in the reply to a commit.
void EngineOutcomeToProto(const EngineOutcome& outcome, v1::EngineResult* out);

}  // namespace wsync

#endif  // WSYNC_DAEMON_WIRE_ENGINE_RESULT_PROTO_H_
