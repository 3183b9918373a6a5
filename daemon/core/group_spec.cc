#include "daemon/core/group_spec.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/network_allow_list.h"
#include "common/status_macros.h"
#include "daemon/core/transport_kind.h"

namespace wsync {

bool GroupSpec::operator==(const GroupSpec& other) const {
  if (name != other.name || kind != other.kind || transport != other.transport ||
      engines != other.engines || device != other.device || nccl_library != other.nccl_library ||
      check_weights != other.check_weights || quorum != other.quorum) {
    return false;
  }
  if (engine_options == nullptr || other.engine_options == nullptr) {
    return engine_options == other.engine_options;
  }
  return engine_options->Equals(*other.engine_options);
}

namespace {

// A UUID as torch prints it (8-4-4-4-12 hex), with or without nvidia-smi's "GPU-" prefix.
bool IsGpuUuid(absl::string_view uuid) {
  if (absl::StartsWithIgnoreCase(uuid, "GPU-")) uuid.remove_prefix(4);
  if (uuid.size() != 36) return false;
  for (size_t i = 0; i < uuid.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? uuid[i] != '-' : !std::isxdigit(static_cast<unsigned char>(uuid[i]))) return false;
  }
  return true;
}

absl::Status ValidateEngineGpus(const GroupSpec& spec, const TransportKind& transport,
                                const EngineSpec& e) {
  if (transport.engines_read_in_place() && e.gpus.size() != e.ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group '", spec.name, "': engine ", e.url, " has ", e.ranks, " rank(s) but ", e.gpus.size(),
        " GPU UUID(s); the ", transport.name(), " transport needs each rank's GPU (\"gpus\")"));
  }
  if (!e.gpus.empty() && e.gpus.size() != e.ranks) {
    return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "': engine ", e.url,
                                                   " has ", e.ranks, " rank(s) but ", e.gpus.size(),
                                                   " GPU UUID(s)"));
  }
  for (const std::string& gpu : e.gpus) {
    if (!IsGpuUuid(gpu)) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': engine ", e.url, ": '", gpu,
                       "' is not a GPU UUID (as nvidia-smi -L prints it, e.g. "
                       "GPU-126c071a-1253-3d49-71ab-17c686b110d5)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateGroupSpec(const GroupSpec& spec) {
  if (spec.name.empty() || spec.name.size() > 64) {
    return absl::InvalidArgumentError("group name must be 1..64 characters");
  }
  for (char c : spec.name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return absl::InvalidArgumentError(absl::StrCat(
          "group name '", spec.name, "' may only contain letters, digits, '_', '-' and '.'"));
    }
  }
  if (spec.device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", spec.name, "': device ", spec.device, " is negative"));
  }
  if (spec.engines.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "' names no engine"));
  }
  if (spec.quorum > spec.engines.size()) {
    return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "': a quorum of ",
                                                   spec.quorum, " engines is more than its ",
                                                   spec.engines.size()));
  }
  const absl::StatusOr<const TransportKind*> transport = TransportOf(spec);
  if (!transport.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", spec.name, "': ", transport.status().message()));
  }
  if (!spec.nccl_library.empty()) {
    if (!(*transport)->loads_nccl_library()) {
      std::vector<std::string> loaders;
      for (const TransportKind* kind : TransportKinds().All()) {
        if (kind->loads_nccl_library()) loaders.push_back(std::string(kind->name()));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "group '", spec.name, "': an NCCL library is for ", absl::StrJoin(loaders, " or "),
          " groups; the ", (*transport)->name(), " transport loads none"));
    }
    const bool printable = std::all_of(spec.nccl_library.begin(), spec.nccl_library.end(),
                                       [](char c) { return c >= 0x20 && c < 0x7f; });
    if (spec.nccl_library.size() > 4096 || !printable) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name,
                       "': the NCCL library must be a printable path of at most 4096 "
                       "characters"));
    }
  }
  // Summed wide: engines declaring 2^31 ranks each must not wrap around to a small world.
  uint64_t ranks = 0;
  for (const EngineSpec& e : spec.engines) {
    // One reading of the URL for every component: the allow-list check and both HTTP clients.
    WSYNC_RETURN_IF_ERROR((*transport)->CheckEngineUrl(e.url));
    if (e.ranks == 0) {
      return absl::InvalidArgumentError(absl::StrCat("engine ", e.url, " declares 0 ranks"));
    }
    WSYNC_RETURN_IF_ERROR(ValidateEngineGpus(spec, **transport, e));
    ranks += e.ranks;
  }
  if (ranks + 1 > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", spec.name, "' has ", ranks + 1,
                     " ranks; torch switches to scalable NCCL init above 128, which is not "
                     "supported"));
  }
  if (spec.kind.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "' names no engine kind"));
  }
  if (spec.engine_options == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", spec.name, "' carries no ", spec.kind, " options"));
  }
  if (spec.engine_options->kind() != spec.kind) {
    return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "' is of kind ", spec.kind,
                                                   " but carries ", spec.engine_options->kind(),
                                                   " options"));
  }
  if (spec.check_weights) {
    if (absl::Status s = spec.engine_options->WeightCheckerSupported(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "': ", s.message()));
    }
  }
  if (absl::Status s = spec.engine_options->Validate(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("group '", spec.name, "': ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace wsync
