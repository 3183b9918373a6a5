#include "daemon/engines/sglang/sglang_options.h"

#include "absl/strings/str_cat.h"

namespace wsync {

bool SglangOptions::Equals(const EngineOptions& other) const {
  const auto* o = dynamic_cast<const SglangOptions*>(&other);
  return o != nullptr && o->load_format_ == load_format_;
}

std::string SglangOptions::Describe() const {
  return absl::StrCat("load_format=", BucketFormatName(load_format_));
}

}  // namespace wsync
