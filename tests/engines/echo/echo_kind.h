#ifndef WSYNC_TESTS_ENGINES_ECHO_ECHO_KIND_H_
#define WSYNC_TESTS_ENGINES_ECHO_ECHO_KIND_H_

#include <memory>

#include "daemon/engines/engine_kind.h"
#include "tests/fakes/fake_adapter.h"

namespace wsync {

// A test-only engine kind, "echo": everything a new engine kind needs, in this one folder. Its
// options are {"greeting": string, "ranks_per_engine": int >= 1}; its adapters are fake engines
// of `cluster` (tests/fakes) that record each lifecycle call.
std::unique_ptr<EngineKindPlugin> MakeEchoEngineKind(std::shared_ptr<FakeCluster> cluster);

}  // namespace wsync

#endif  // WSYNC_TESTS_ENGINES_ECHO_ECHO_KIND_H_
