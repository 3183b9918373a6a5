#include "daemon/engines/lmdeploy/lmdeploy_options.h"

#include "absl/strings/str_cat.h"

namespace wsync {

absl::string_view LmdeployLoadFormatName(BucketFormat format) {
  return format == BucketFormat::kFlattened ? "flattened_bucket" : "null";
}

bool LmdeployOptions::Equals(const EngineOptions& other) const {
  const auto* o = dynamic_cast<const LmdeployOptions*>(&other);
  return o != nullptr && o->load_format_ == load_format_;
}

std::string LmdeployOptions::Describe() const {
  return absl::StrCat("load_format=", LmdeployLoadFormatName(load_format_));
}

}  // namespace wsync
