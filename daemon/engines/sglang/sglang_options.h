#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_OPTIONS_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_OPTIONS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/core/group_spec.h"
#include "daemon/engines/bucket_format.h"

namespace wsync {

// A group's SGLang-only settings. On the broadcast, kFlattened is one uint8 broadcast of all the
// bucket's bytes and kPerTensor one broadcast per tensor in its own dtype.
class SglangOptions final : public EngineOptions {
 public:
  SglangOptions() = default;
  explicit SglangOptions(BucketFormat load_format) : load_format_(load_format) {}

  EngineKind kind() const override { return EngineKind::kSglang; }
  absl::Status Validate() const override { return absl::OkStatus(); }
  bool Equals(const EngineOptions& other) const override;
  std::string Describe() const override;

  BucketFormat load_format() const { return load_format_; }

 private:
  BucketFormat load_format_ = BucketFormat::kFlattened;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_OPTIONS_H_
