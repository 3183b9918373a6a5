#ifndef WSYNC_DAEMON_TRANSPORT_IPC_ENGINE_DROPS_H_
#define WSYNC_DAEMON_TRANSPORT_IPC_ENGINE_DROPS_H_

#include <cstddef>
#include <map>
#include <mutex>

#include "absl/status/status.h"

namespace wsync {

// The engines one update of a quorum group goes on without. Over CUDA IPC each engine reads its
// own bucket requests and no engine waits on another, so an engine whose bucket failed can be
// left out of the rest of the update while the others carry on: it gets no later bucket, and the
// group marks it as needing a full version. That holds only while `needed` engines remain;
// otherwise the bucket fails as it would without a quorum. Shared by the update's buckets.
class EngineDrops {
 public:
  // `engines` in the update; `needed` 0: none may be dropped.
  EngineDrops(size_t engines, size_t needed) : engines_(engines), needed_(needed) {}

  // Why `engine` was dropped; OK while it was not.
  absl::Status WhyDropped(size_t engine) const;
  // Drops the engines of `failed` (index -> why), all or none: false, dropping none, when fewer
  // than `needed` would remain. Engines already dropped are not counted twice.
  bool TryDrop(const std::map<size_t, absl::Status>& failed);
  // Every engine dropped so far, with why.
  std::map<size_t, absl::Status> all() const;

 private:
  const size_t engines_;
  const size_t needed_;
  mutable std::mutex mu_;
  std::map<size_t, absl::Status> dropped_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_IPC_ENGINE_DROPS_H_
