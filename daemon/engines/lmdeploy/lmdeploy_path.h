#ifndef WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_PATH_H_
#define WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_PATH_H_

#include "absl/status/status.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "daemon/core/http_reply.h"

namespace wsync {

// The colocated path's bucket route, which the adapter's Probe requires of every server.
inline constexpr char kLmdeployIpcBucketPath[] = "/update_weights";

// What each of LMDeploy's data-path bindings adds to the adapter's shared calls.
class LmdeployPath {
 public:
  virtual ~LmdeployPath() = default;
  // After Probe read the routes: whether this path can be served (`update_group`: the server
  // has POST /init_weights_update_group, PR #4638).
  virtual absl::Status CheckRoutes(bool update_group) const = 0;
  // The payload variant this path gets, from the routes the last Probe read.
  virtual void AddHealth(bool update_group, EngineHealth* health) const = 0;
  virtual absl::Status ValidateBucket(const BucketManifest& manifest) const = 0;
  virtual absl::Status CheckBucketReply(const HttpReply& reply) const = 0;
  // The update's finish when no bucket carried it: one request that loads nothing and runs the
  // model's post-load hooks.
  virtual absl::Status FinishOnly() = 0;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_PATH_H_
