#ifndef WSYNC_DAEMON_CORE_GROUP_SPEC_H_
#define WSYNC_DAEMON_CORE_GROUP_SPEC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace wsync {

struct EngineSpec {
  std::string url;
  uint32_t ranks = 1;  // ranks this engine adds to the group (its TP size)
  // The GPU of each of its ranks, by UUID (TP rank i on gpus[i]); required by a transport whose
  // engines read the trainer's bytes in place (colocated), whose payload for rank i must name
  // memory on rank i's GPU.
  std::vector<std::string> gpus = {};
  bool operator==(const EngineSpec&) const = default;
};

// Options only one engine kind understands. Each engine kind defines, parses and writes its own
// (daemon/engines/<kind>); the core holds them without reading them, so a new option or a new
// kind never touches it.
class EngineOptions {
 public:
  virtual ~EngineOptions() = default;
  // The name of the engine kind these options belong to ("sglang").
  virtual absl::string_view kind() const = 0;
  virtual absl::Status Validate() const = 0;
  // OK when the kind's engines answer a weight checker (GroupSpec::check_weights); else why not.
  virtual absl::Status WeightCheckerSupported() const { return absl::OkStatus(); }
  virtual bool Equals(const EngineOptions& other) const = 0;
  // "load_format=flattened_bucket", for logs and tables.
  virtual std::string Describe() const = 0;
  // Streams: the devices whose trainer sessions each feed buckets of their own to one update
  // (each trainer rank pushes its own part from its own GPU, and each bucket goes out from the
  // device it was pushed to). Empty (the default): the group's feeds follow from its transport.
  virtual std::vector<int> stream_devices() const { return {}; }
};

// Everything that defines a weight group. The config file, the admin API and wsyncctl all map to
// this one struct, and ValidateGroupSpec is the one check every path goes through.
struct GroupSpec {
  std::string name;
  // The engine kind, by the name it is registered under (daemon/engines/engine_kind.h); a
  // config file's groups default to "sglang".
  std::string kind;
  // How its buckets reach its engines: a transport by the name it is registered under
  // (daemon/core/transport_kind.h); a config file's groups default to "broadcast".
  std::string transport;
  std::vector<EngineSpec> engines;
  int device = 0;  // the GPU whose slots feed the group (rank 0 of a broadcast)
  // Never null in a validated spec; of the same kind as `kind`.
  std::shared_ptr<const EngineOptions> engine_options;
  // The NCCL library wsyncd's rank 0 loads for this group (a path or soname), "" for wsyncd's
  // --nccl-lib. NCCL connects only peers of its own version, and each engine bundles its own
  // (vLLM and SGLang the nvidia-nccl wheel their torch pins), so groups of different engines
  // may each need a different one. Only for a transport that loads one.
  std::string nccl_library;
  // After every commit, ask each engine's own weight checker for its checksums and compare the
  // engines with each other (weights_check.h): an engine whose weights differ fails the update and
  // waits, paused, for a full version. SGLang and vLLM only (LMDeploy has no checker).
  bool check_weights = false;
  // How many engines an update needs; 0: all of them (all or nothing). With fewer, an update
  // goes on without an engine that fails: before its first bucket (it fails its probe, its join
  // or its pause; a broadcast group re-forms without it, ranks renumbered), during it on the
  // IPC transport's per-bucket requests (it gets no later bucket of the update), and at the
  // commit. The update commits once at least `quorum` engines committed it; every engine left
  // out is paused where it answers and waits for a full version, and the result names each.
  uint32_t quorum = 0;

  bool operator==(const GroupSpec& other) const;
};

// Checks the name, engines, rank count, what the spec's transport needs of them (a registered
// transport) and the engine's own options (that the engine kind is a registered one is checked
// where the spec is read: config, admin API).
absl::Status ValidateGroupSpec(const GroupSpec& spec);

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_GROUP_SPEC_H_
