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

absl::string_view VllmRendezvousName(VllmRendezvous mode) {
  return mode == VllmRendezvous::kUniqueId ? "unique-id" : "store";
}

absl::StatusOr<VllmRendezvous> ParseVllmRendezvous(absl::string_view name) {
  if (name == "store") return VllmRendezvous::kStore;
  if (name == "unique-id") return VllmRendezvous::kUniqueId;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown vllm rendezvous '", name, "' (store, unique-id)"));
}

absl::Status VllmOptions::Validate() const {
  if (packed_chunk_bytes_ == 0) {
    return absl::InvalidArgumentError("vllm packed_chunk_bytes must be positive");
  }
  return absl::OkStatus();
}

bool VllmOptions::Equals(const EngineOptions& other) const {
  const auto* o = dynamic_cast<const VllmOptions*>(&other);
  return o != nullptr && o->packed_ == packed_ && o->pause_mode_ == pause_mode_ &&
         o->wake_weights_ == wake_weights_ && o->reset_prefix_cache_ == reset_prefix_cache_ &&
         o->rendezvous_ == rendezvous_ && o->packed_chunk_bytes_ == packed_chunk_bytes_ &&
         o->engine_version_ == engine_version_;
}

std::string VllmOptions::Describe() const {
  return absl::StrCat(packed_ ? "packed" : "unpacked", ", pause=", VllmPauseModeName(pause_mode_),
                      wake_weights_ ? ", wake_weights" : ", no wake",
                      reset_prefix_cache_ ? ", reset_prefix_cache" : ", keep prefix cache",
                      ", rendezvous=", VllmRendezvousName(rendezvous_),
                      packed_chunk_bytes_ == kVllmDefaultPackedChunkBytes
                          ? std::string()
                          : absl::StrCat(", chunk=", packed_chunk_bytes_),
                      engine_version_.empty() ? "" : ", engine_version=", engine_version_);
}

}  // namespace wsync
