#ifndef WSYNC_DAEMON_ENGINES_ENGINE_ADAPTER_H_
#define WSYNC_DAEMON_ENGINES_ENGINE_ADAPTER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/gpu_seam.h"
#include "common/manifest.h"
#include "daemon/engines/http_json.h"

namespace wsync {

enum class EngineKind { kSglang, kVllm, kLmdeploy };

absl::StatusOr<EngineKind> ParseEngineKind(absl::string_view name);
absl::string_view EngineKindName(EngineKind kind);

// How a bucket crosses the collective: one uint8 broadcast of all its bytes (SGLang's
// load_format "flattened_bucket"), or one broadcast per tensor in its own dtype (load_format null).
enum class BucketFormat { kFlattened, kPerTensor };

absl::StatusOr<BucketFormat> ParseBucketFormat(absl::string_view name);
absl::string_view BucketFormatName(BucketFormat format);

struct EngineEndpoint {
  std::string url;
  uint32_t ranks = 1;        // ranks this engine adds to the group (its TP size)
  uint32_t rank_offset = 1;  // its first rank in the group
};

// Where engines rendezvous with the daemon for one group instance.
struct Rendezvous {
  std::string master_address;
  uint16_t master_port = 0;
  uint32_t world_size = 0;
  std::string group_name;
};

struct EngineHealth {
  bool healthy = false;
  std::string engine_version;
  std::string weight_version;
  std::string error;
};

// One HTTP POST with a JSON body.
struct EngineRequest {
  std::string path;
  std::string json_body;
};

struct AdapterTimeouts {
  absl::Duration control = absl::Seconds(30);  // init, pause, resume, version, destroy
  absl::Duration probe = absl::Seconds(5);     // health
};

// One engine endpoint of one weight group, speaking that engine's own HTTP API. Calls are
// thread-safe; the group runs them concurrently across its engines.
class EngineAdapter {
 public:
  virtual ~EngineAdapter() = default;
  virtual const EngineEndpoint& endpoint() const = 0;
  // Checks version, parallel sizes and anything else that would make the group fail later.
  virtual absl::Status Probe() = 0;
  // Asks the engine's ranks to join the group; returns once they have (or failed).
  virtual absl::Status InitGroup(const Rendezvous& rendezvous) = 0;
  virtual absl::Status DestroyGroup(const std::string& group_name) = 0;
  virtual absl::Status PauseGeneration() = 0;
  virtual absl::Status ResumeGeneration() = 0;
  // The bucket's update request, sent on the update's UpdateChannel. The engine answers once it
  // has received and loaded the bucket, which needs the daemon's broadcast of it meanwhile.
  virtual EngineRequest BucketRequest(const BucketManifest& manifest,
                                      const std::string& group_name) const = 0;
  // OK when the engine's answer to BucketRequest says it loaded the bucket.
  virtual absl::Status CheckBucketReply(const HttpReply& reply) const = 0;
  // Records the version, flushes caches computed with old weights, resumes generation.
  virtual absl::Status FinishUpdate(const std::string& version) = 0;
  virtual EngineHealth Health() = 0;
  // Checks a bucket against what this engine can receive, before any byte moves.
  virtual absl::Status ValidateBucket(const BucketManifest& manifest) const = 0;
  // The collective calls the engine's receive expects for the bucket, in order.
  virtual std::vector<BroadcastPiece> BroadcastPieces(const BucketManifest& manifest) const = 0;
};

std::unique_ptr<EngineAdapter> MakeEngineAdapter(EngineKind kind, EngineEndpoint endpoint,
                                                 AdapterTimeouts timeouts, BucketFormat format);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_ENGINE_ADAPTER_H_
