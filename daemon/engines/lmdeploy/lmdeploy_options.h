#ifndef WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_OPTIONS_H_
#define WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_OPTIONS_H_

#include <string>

#include "daemon/core/group_spec.h"
#include "daemon/engines/bucket_format.h"

namespace wsync {

// A group's LMDeploy-only settings: the load_format of its /update_weights requests.
// kFlattened ("flattened_bucket", the default) names the slot once per request as one tensor typed
// as the bucket's dtype, so every bucket has one dtype; kPerTensor (null) names each tensor as its
// own view, so a bucket may mix dtypes.
class LmdeployOptions final : public EngineOptions {
 public:
  LmdeployOptions() = default;
  explicit LmdeployOptions(BucketFormat load_format) : load_format_(load_format) {}

  absl::string_view kind() const override { return "lmdeploy"; }
  absl::Status Validate() const override { return absl::OkStatus(); }
  // LMDeploy has no route that reports checksums of the weights it serves.
  absl::Status WeightCheckerSupported() const override {
    return absl::InvalidArgumentError("LMDeploy has no weight checker to compare engines with");
  }
  bool Equals(const EngineOptions& other) const override;
  // "load_format=flattened_bucket" or "load_format=null", as LMDeploy spells them.
  std::string Describe() const override;

  BucketFormat load_format() const { return load_format_; }

 private:
  BucketFormat load_format_ = BucketFormat::kFlattened;
};

// LMDeploy's own word for a format: "flattened_bucket" or "null".
absl::string_view LmdeployLoadFormatName(BucketFormat format);

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_LMDEPLOY_LMDEPLOY_OPTIONS_H_
