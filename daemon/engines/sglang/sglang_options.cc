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

absl::string_view SglangIpcRouteName(SglangIpcRoute route) {
  return route == SglangIpcRoute::kIpc ? "ipc" : "tensor";
}

absl::StatusOr<SglangIpcRoute> ParseSglangIpcRoute(absl::string_view name) {
  if (name == "tensor") return SglangIpcRoute::kTensor;
  if (name == "ipc") return SglangIpcRoute::kIpc;
  return absl::InvalidArgumentError(
      absl::StrCat("sglang ipc_route must be \"tensor\" or \"ipc\", not \"", name, "\""));
}

bool SglangOptions::Equals(const EngineOptions& other) const {
  const auto* o = dynamic_cast<const SglangOptions*>(&other);
  return o != nullptr && o->load_format_ == load_format_ && o->memory_ == memory_ &&
         o->ipc_route_ == ipc_route_ && o->engine_version_ == engine_version_;
}

std::string SglangOptions::Describe() const {
  std::string out = absl::StrCat("load_format=", BucketFormatName(load_format_));
  if (memory_ != SglangMemory::kKeep) absl::StrAppend(&out, ", memory=", SglangMemoryName(memory_));
  if (ipc_route_ != SglangIpcRoute::kTensor) {
    absl::StrAppend(&out, ", ipc_route=", SglangIpcRouteName(ipc_route_));
  }
  if (!engine_version_.empty()) absl::StrAppend(&out, ", engine_version=", engine_version_);
  return out;
}

}  // namespace wsync
