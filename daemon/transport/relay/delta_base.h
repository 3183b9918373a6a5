#ifndef WSYNC_DAEMON_TRANSPORT_RELAY_DELTA_BASE_H_
#define WSYNC_DAEMON_TRANSPORT_RELAY_DELTA_BASE_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/manifest.h"
#include "daemon/relay/version_fingerprint.h"

namespace wsync {

// What a relay group's deltas are computed against (docs/DELTA.md): the upstream's copy of the
// version its members hold, tensor by tensor (by name, dtype and shape: bucket plans may differ
// between versions), in host memory under a cap.
//
// Every bucket of an update is staged as it is sent. At the next update's begin the members say
// which version their resident copy holds whole, by its fingerprint (VersionFingerprint: the
// label and every bucket's tensors and CRC-32, so a label pushed twice with other bytes, or an
// update cut short, is another version); the base becomes the staged version where every member
// that holds one holds it (their update committed), else it stays the previous one; the other
// is dropped. So the base is what the members hold, never a mix of two versions, and it advances
// only with a version that landed. A member that holds another version gets that update dense.
// Thread-safe.
class DeltaBase {
 public:
  explicit DeltaBase(uint64_t cap_bytes) : cap_bytes_(cap_bytes) {}

  // An update to `version` (its label) begins; `held` are the members' resident versions, by
  // fingerprint ("" none).
  void Begin(const std::string& version, const std::vector<std::string>& held);
  // The base's fingerprint ("" none) and why there is none.
  std::string version() const;
  std::string why_none() const;
  // Copies the base's bytes of each of the manifest's tensors into `out` at their offsets; false
  // where one is not in the base with the same dtype, shape and length (then the bucket goes
  // dense).
  bool Assemble(const BucketManifest& manifest, absl::Span<uint8_t> out) const;
  // Stages the bucket's tensors (`span`: the bucket's bytes) as part of the open update's
  // version. Past the cap, the version is not staged (its update goes on; the next is dense).
  void Stage(uint64_t index, const BucketManifest& manifest, uint32_t crc32,
             absl::Span<const uint8_t> span);
  // Bytes held: the base and what is staged.
  uint64_t bytes() const;

 private:
  struct Tensor {
    DType dtype = DType::kUint8;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  struct Version {
    std::string name;  // the fingerprint once settled; the label while staged
    VersionFingerprint print;
    std::map<std::string, Tensor> tensors;
    uint64_t bytes = 0;
    bool failed = false;  // a bucket could not be staged
  };

  const uint64_t cap_bytes_;
  mutable std::mutex mu_;
  Version base_;    // guarded by mu_; name "" when there is none
  Version staged_;  // guarded by mu_; the open update's
  // guarded by mu_: the tensors of the version dropped at the last Begin, whose memory the next
  // staged tensors of the same names take over (their pages already mapped: a model's tensors
  // keep their names and sizes from version to version); freed at the next Begin.
  std::map<std::string, Tensor> spare_;
  std::string why_none_ = "no update has been relayed yet";  // guarded by mu_
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_TRANSPORT_RELAY_DELTA_BASE_H_
