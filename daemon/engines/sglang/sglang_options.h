#ifndef WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_OPTIONS_H_
#define WSYNC_DAEMON_ENGINES_SGLANG_SGLANG_OPTIONS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/core/group_spec.h"

namespace wsync {

// How a bucket crosses the collective: one uint8 broadcast of all its bytes (SGLang's
// load_format "flattened_bucket"), or one broadcast per tensor in its own dtype (load_format null).
enum class BucketFormat { kFlattened, kPerTensor };

absl::StatusOr<BucketFormat> ParseBucketFormat(absl::string_view name);
absl::string_view BucketFormatName(BucketFormat format);

// A group's SGLang-only settings.
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
