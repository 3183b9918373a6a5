#include "daemon/engines/vllm/vllm_options.h"

#include "absl/strings/str_cat.h"

namespace wsync {

absl::string_view VllmPauseModeName(VllmPauseMode mode) {
  switch (mode) {
    case VllmPauseMode::kKeep:
      return "keep";
    case VllmPauseMode::kWait:
      return "wait";
    case VllmPauseMode::kAbort:
      return "abort";
  }
  return "keep";
}

absl::StatusOr<VllmPauseMode> ParseVllmPauseMode(absl::string_view name) {
  if (name == "keep") return VllmPauseMode::kKeep;
  if (name == "wait") return VllmPauseMode::kWait;
  if (name == "abort") return VllmPauseMode::kAbort;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown vllm pause mode '", name, "' (keep, wait, abort)"));
}

bool VllmOptions::Equals(const EngineOptions& other) const {
  const auto* o = dynamic_cast<const VllmOptions*>(&other);
  return o != nullptr && o->packed_ == packed_ && o->pause_mode_ == pause_mode_ &&
         o->wake_weights_ == wake_weights_ && o->reset_prefix_cache_ == reset_prefix_cache_;
}

std::string VllmOptions::Describe() const {
  return absl::StrCat(packed_ ? "packed" : "unpacked", ", pause=", VllmPauseModeName(pause_mode_),
                      wake_weights_ ? ", wake_weights" : ", no wake",
                      reset_prefix_cache_ ? ", reset_prefix_cache" : ", keep prefix cache");
}

}  // namespace wsync
