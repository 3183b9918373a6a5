#ifndef WSYNC_TESTS_TRANSPORT_LOOP_LOOP_KIND_H_
#define WSYNC_TESTS_TRANSPORT_LOOP_LOOP_KIND_H_

#include <memory>

#include "daemon/core/transport_kind.h"
#include "tests/fakes/fake_adapter.h"

namespace wsync {

// A test-only transport, "loop": everything a new transport needs, in this one folder (its
// binding interface in loop_binding.h). It moves bytes as the fake transport does, to the fake
// engines of `cluster`, after each engine's LoopBinding greeted it (recorded in the engine's
// events as "loop hello <what it said>").
std::unique_ptr<TransportKind> MakeLoopTransportKind(std::shared_ptr<FakeCluster> cluster);

}  // namespace wsync

#endif  // WSYNC_TESTS_TRANSPORT_LOOP_LOOP_KIND_H_
