#include "daemon/engines/sglang/sglang_options.h"

#include "absl/strings/str_cat.h"

namespace wsync {

absl::string_view SglangMemoryName(SglangMemory memory) {
  return memory == SglangMemory::kResume ? "resume" : "keep";
}

absl::StatusOr<SglangMemory> ParseSglangMemory(absl::string_view name) {
  if (name == "keep") return SglangMemory::kKeep;
  if (name == "resume") return SglangMemory::kResume;
  return absl::InvalidArgumentError(
      absl::StrCat("sglang memory must be \"keep\" or \"resume\", not \"", name, "\""));
}

bool SglangOptions::Equals(const EngineOptions& other) const {
  const auto* o = dynamic_cast<const SglangOptions*>(&other);
  return o != nullptr && o->load_format_ == load_format_ && o->memory_ == memory_;
}

std::string SglangOptions::Describe() const {
  if (memory_ == SglangMemory::kKeep) {
    return absl::StrCat("load_format=", BucketFormatName(load_format_));
  }
  return absl::StrCat("load_format=", BucketFormatName(load_format_),
                      ", memory=", SglangMemoryName(memory_));
}

}  // namespace wsync
