#ifndef WSYNC_DAEMON_CORE_TRANSPORT_KIND_H_
#define WSYNC_DAEMON_CORE_TRANSPORT_KIND_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/checksum.h"
#include "daemon/core/transport.h"

namespace wsync {

// One transport as the core knows it: what a group spec naming it must hold, which data paths it
// drives, and how to make one. Each transport is a folder under daemon/transport that registers
// one of these (daemon/transport/builtin_transport_kinds.inc); the core asks only these
// questions, so a new transport never edits it.
class TransportKind {
 public:
  virtual ~TransportKind() = default;
  // The name group specs give it ("broadcast").
  virtual absl::string_view name() const = 0;
  // Other names a spec may give it (older spellings); "" never.
  virtual std::vector<std::string> aliases() const { return {}; }
  // The data paths it moves buckets over, in the order it prefers them: each engine of its group
  // needs a binding of one (EngineAdapter::Binding).
  virtual std::vector<std::string> data_paths() const = 0;
  // True where the engines read the trainer's bytes in place on their own GPUs (colocated): every
  // engine rank names its GPU (EngineSpec::gpus), each of those GPUs is fed by the trainer, and a
  // bucket read in place must have every tensor on its dtype's boundary (engines view the bytes
  // as typed tensors).
  virtual bool engines_read_in_place() const { return false; }
  // True where rank 0 of its groups loads an NCCL library (GroupSpec::nccl_library).
  virtual bool loads_nccl_library() const { return false; }
  // How a trainer that leaves the choice to the group feeds engines on `data_path`
  // (UpdateStarted.pull_preferred, true only where every engine's path says so): true where
  // wsyncd reading the trainer's tensors itself (pull mode) measured faster than the trainer
  // copying them into slots, in the benchmarks docs/PERFORMANCE.md reports.
  virtual bool pull_by_default(absl::string_view data_path) const { return false; }
  // The checksum trainer-filled buckets carry when wsyncd's --checksum is "auto" (the default):
  // crc32 where the bytes then cross a wire; a transport whose engines read the bytes on the GPU
  // that filled them may ask only for the sampled check (common/checksum.h).
  virtual ChecksumKind checksum_by_default() const { return ChecksumKind::kCrc32; }
  // True where its engines are HTTP servers (http://host:port, checked against the daemon's
  // engine_networks); false where its members are something else (the relay's downstream
  // daemons, wsyncd://node), which CheckEngineUrl then reads.
  virtual bool engines_speak_http() const { return true; }
  // OK when `url` names an engine of this transport: an HTTP URL unless engines_speak_http says
  // otherwise.
  virtual absl::Status CheckEngineUrl(const std::string& url) const;
  virtual absl::StatusOr<std::unique_ptr<Transport>> Make(TransportEnv env) const = 0;
};

// The transports this wsyncd serves, by name and alias. Filled once at start
// (RegisterBuiltinTransportKinds, daemon/transport/builtin_transport_kinds.h); read-only after, so
// lookups need no lock.
class TransportRegistry {
 public:
  // Fails if the name or an alias is taken.
  absl::Status Register(std::unique_ptr<TransportKind> kind);
  // INVALID_ARGUMENT naming the registered transports when `name` is none of them.
  absl::StatusOr<const TransportKind*> Find(absl::string_view name) const;
  // The registered names (aliases left out), sorted.
  std::vector<std::string> Names() const;
  // The registered transports, by name.
  std::vector<const TransportKind*> All() const;

 private:
  std::map<std::string, std::unique_ptr<TransportKind>, std::less<>> kinds_;
  std::map<std::string, const TransportKind*, std::less<>> aliases_;
};

// The process's registry.
TransportRegistry& TransportKinds();

// The transport the spec names, by its registered name (an alias is read as its name).
absl::StatusOr<const TransportKind*> TransportOf(const GroupSpec& spec);

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_TRANSPORT_KIND_H_
