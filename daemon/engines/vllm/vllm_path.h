#ifndef WSYNC_DAEMON_ENGINES_VLLM_VLLM_PATH_H_
#define WSYNC_DAEMON_ENGINES_VLLM_VLLM_PATH_H_

#include "absl/status/status.h"

namespace wsync {

// vLLM's weight-transfer backends (its --weight-transfer-config "backend"), one per data path.
enum class VllmBackend { kNccl, kIpc };

// Both backends' bucket route: POST /update_weights.
inline constexpr char kVllmBucketPath[] = "/update_weights";

// What each of vLLM's data-path bindings adds to the adapter's shared calls.
class VllmPath {
 public:
  virtual ~VllmPath() = default;
  // The backend the server must run for this path; it picks the version table and the advice.
  virtual VllmBackend backend() const = 0;
  // After Probe's version check: what only this path asks of the server.
  virtual absl::Status ProbeServer() = 0;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_VLLM_VLLM_PATH_H_
