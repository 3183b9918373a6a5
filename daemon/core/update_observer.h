#ifndef WSYNC_DAEMON_CORE_UPDATE_OBSERVER_H_
#define WSYNC_DAEMON_CORE_UPDATE_OBSERVER_H_

#include <cstdint>
#include <string>

#include "daemon/core/update_run.h"

namespace wsync {

// Hears each bucket and each update as they end, for metrics and logs; the core calls it and
// never knows who listens. Calls come from the updates' threads, concurrently for different
// updates, and must return quickly: an answer thread waits on them.
class UpdateObserver {
 public:
  virtual ~UpdateObserver() = default;
  // One bucket of `group` reached every engine (`bytes` of it, its time split as measured).
  virtual void BucketDone(const std::string& group, uint64_t bytes, const BucketTiming& timing) {}
  // An update of `group` ended: `state` is committed, failed or aborted.
  virtual void UpdateDone(const std::string& group, const std::string& version,
                          const std::string& state, const UpdateOutcome& outcome) {}
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_UPDATE_OBSERVER_H_
