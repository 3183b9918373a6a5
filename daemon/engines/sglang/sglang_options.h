#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_OPTIONS_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_OPTIONS_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "daemon/core/group_spec.h"
#include "daemon/engines/bucket_format.h"

namespace wsync {

// What wsyncd does with a colocated engine's GPU memory around an update. kKeep, the default,
// does nothing and suits any server. kResume follows the colocated RL cycle (SGLang's
// release/resume_memory_occupation): training releases the engine's memory ({"tags": null}) before
// each update; wsyncd resumes "weights" after pausing, loads the buckets, and resumes "kv_cache"
// after the commit (and before generation resumes on an aborted update). SGLang refuses to resume a
// tag it did not release, so kResume needs the release before every update.
enum class SglangMemory { kKeep, kResume };
absl::string_view SglangMemoryName(SglangMemory memory);
absl::StatusOr<SglangMemory> ParseSglangMemory(absl::string_view name);

// Which route a colocated (IPC) group's buckets take. kTensor, the default, is one
// POST /update_weights_from_tensor per bucket, each carrying every rank's pickled handles
// (docs/engines/sglang.md). kIpc is POST /update_weights_from_ipc once per update: each rank
// maps its buffer once and takes each bucket's metadata over a ZMQ socket (checkpoint-engine's
// protocol, 3.8); the engine needs the checkpoint-engine package.
enum class SglangIpcRoute { kTensor, kIpc };
absl::string_view SglangIpcRouteName(SglangIpcRoute route);
absl::StatusOr<SglangIpcRoute> ParseSglangIpcRoute(absl::string_view name);

// A group's SGLang-only settings. On the broadcast, kFlattened is one uint8 broadcast of all the
// bucket's bytes and kPerTensor one broadcast per tensor in its own dtype.
class SglangOptions final : public EngineOptions {
 public:
  SglangOptions() = default;
  explicit SglangOptions(BucketFormat load_format, SglangMemory memory = SglangMemory::kKeep,
                         SglangIpcRoute ipc_route = SglangIpcRoute::kTensor,
                         std::string engine_version = "")
      : load_format_(load_format),
        memory_(memory),
        ipc_route_(ipc_route),
        engine_version_(std::move(engine_version)) {}

  absl::string_view kind() const override { return "sglang"; }
  absl::Status Validate() const override { return absl::OkStatus(); }
  bool Equals(const EngineOptions& other) const override;
  std::string Describe() const override;

  BucketFormat load_format() const { return load_format_; }
  SglangMemory memory() const { return memory_; }
  SglangIpcRoute ipc_route() const { return ipc_route_; }
  // The release the version gates read every engine as ("": each engine's own; engine_version.h).
  const std::string& engine_version() const { return engine_version_; }

 private:
  BucketFormat load_format_ = BucketFormat::kFlattened;
  SglangMemory memory_ = SglangMemory::kKeep;
  SglangIpcRoute ipc_route_ = SglangIpcRoute::kTensor;
  std::string engine_version_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_OPTIONS_H_
