#ifndef WSYNC_DAEMON_ENGINES_ADAPTER_FACTORY_H_
#define WSYNC_DAEMON_ENGINES_ADAPTER_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/core/group_spec.h"

namespace wsync {

// The adapter of one engine of a group, for the spec's engine kind and options.
absl::StatusOr<std::unique_ptr<EngineAdapter>> MakeEngineAdapter(const GroupSpec& spec,
                                                                 const EngineEndpoint& endpoint,
                                                                 const AdapterTimeouts& timeouts);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_ADAPTER_FACTORY_H_
