#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_PATH_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_PATH_H_

#include "absl/status/status.h"
#include "common/manifest.h"
#include "daemon/core/engine_adapter.h"
#include "nlohmann/json.hpp"

namespace wsync {

// What each of SGLang's data-path bindings adds to the adapter's shared calls: the route its
// bucket requests go to, and its part of Probe, Health and ValidateBucket.
class SglangPath {
 public:
  virtual ~SglangPath() = default;
  // The route its bucket requests go to; their answers are judged as that route's.
  virtual const char* bucket_path() const = 0;
  // After Probe's shared checks, with the server's /get_server_info answer.
  virtual absl::Status ProbeServer(const nlohmann::json& info) = 0;
  // The payload variant this path gets, read from a /get_server_info answer.
  virtual void AddHealth(const nlohmann::json& info, EngineHealth* health) const = 0;
  virtual absl::Status ValidateBucket(const BucketManifest& manifest) const = 0;
};

class SglangAdapter;

// What SGLang's two IPC paths share: the payload follows the server's version, read at Probe
// (SglangAdapter::ProbeIpcVersion) and shown by Health.
class SglangIpcPath : public SglangPath {
 public:
  explicit SglangIpcPath(SglangAdapter& adapter) : adapter_(adapter) {}
  absl::Status ProbeServer(const nlohmann::json& info) override;
  void AddHealth(const nlohmann::json& info, EngineHealth* health) const override;

 protected:
  SglangAdapter& adapter_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_PATH_H_
