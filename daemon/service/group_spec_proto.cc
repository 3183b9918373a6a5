#include "daemon/service/group_spec_proto.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/transport_kind.h"
#include "daemon/engines/engine_kind.h"
#include "daemon/service/legacy_engine_options.h"

namespace wsync {
namespace {

v1::GroupState StateToProto(GroupState state) {
  switch (state) {
    case GroupState::kForming:
      return v1::GROUP_STATE_FORMING;
    case GroupState::kReady:
      return v1::GROUP_STATE_READY;
    case GroupState::kUpdating:
      return v1::GROUP_STATE_UPDATING;
    case GroupState::kBroken:
      return v1::GROUP_STATE_BROKEN;
    case GroupState::kDestroyed:
      return v1::GROUP_STATE_DESTROYED;
  }
  return v1::GROUP_STATE_UNSPECIFIED;
}

// The spec's kind: kind_name, or the deprecated enum.
absl::StatusOr<std::string> KindFromProto(const v1::GroupSpec& proto) {
  if (!proto.kind_name().empty()) {
    WSYNC_RETURN_IF_ERROR(EngineKinds().Find(proto.kind_name()).status());
    return proto.kind_name();
  }
  if (proto.kind() == v1::ENGINE_KIND_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat("engine kind is required (kind_name: one of ",
                                                   absl::StrJoin(EngineKinds().Names(), ", "),
                                                   ")"));
  }
  WSYNC_ASSIGN_OR_RETURN(std::string name, LegacyKindName(proto.kind()));
  WSYNC_LOG(Warning, "group '", proto.name(), "': the admin API's GroupSpec.kind enum is ",
            "deprecated; send kind_name \"", name, "\"");
  return name;
}

// The spec's options: engine_options_json, the deprecated typed options, or the kind's defaults.
absl::StatusOr<std::shared_ptr<const EngineOptions>> OptionsFromProto(const v1::GroupSpec& proto,
                                                                      const GroupSpec& spec) {
  // Both forms may be sent (wsyncd answers with both): then they must agree.
  std::shared_ptr<const EngineOptions> from_json;
  if (!proto.engine_options_json().empty()) {
    const nlohmann::json options = nlohmann::json::parse(proto.engine_options_json(), nullptr,
                                                         /*allow_exceptions=*/false);
    if (options.is_discarded() || !options.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", spec.name, "': engine_options_json is not a JSON object"));
    }
    WSYNC_ASSIGN_OR_RETURN(from_json, ParseEngineOptions(spec.kind, options, spec.name));
  }
  if (proto.engine_options_case() == v1::GroupSpec::ENGINE_OPTIONS_NOT_SET) {
    if (from_json != nullptr) return from_json;
    return DefaultEngineOptions(spec.kind);
  }
  std::string options_kind;
  WSYNC_ASSIGN_OR_RETURN(nlohmann::json options, LegacyOptionsJson(proto, &options_kind));
  if (options_kind != spec.kind) {
    return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "' is of kind ", spec.kind,
                                                   " but carries ", options_kind, " options"));
  }
  WSYNC_ASSIGN_OR_RETURN(std::shared_ptr<const EngineOptions> typed,
                         ParseEngineOptions(spec.kind, options, spec.name));
  if (from_json == nullptr) {
    WSYNC_LOG(Warning, "group '", spec.name, "': the admin API's typed ", options_kind,
              " options are deprecated; send engine_options_json ", options.dump());
    return typed;
  }
  if (!typed->Equals(*from_json)) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", spec.name, "': engine_options_json (", from_json->Describe(),
                     ") and the deprecated typed ", options_kind, " options (", typed->Describe(),
                     ") disagree; send engine_options_json alone"));
  }
  return from_json;
}

// The spec's transport: transport_name (an alias read as its name), or the deprecated enum.
absl::StatusOr<std::string> TransportFromProto(const v1::GroupSpec& proto) {
  if (!proto.transport_name().empty()) {
    WSYNC_ASSIGN_OR_RETURN(const TransportKind* kind,
                           TransportKinds().Find(proto.transport_name()));
    const std::string name(kind->name());
    if (proto.transport() != v1::TRANSPORT_UNSPECIFIED &&
        LegacyTransportOf(name) != proto.transport()) {
      return absl::InvalidArgumentError(
          absl::StrCat("group '", proto.name(), "': transport_name \"", proto.transport_name(),
                       "\" and the deprecated transport enum (",
                       v1::Transport_Name(proto.transport()), ") disagree"));
    }
    return name;
  }
  WSYNC_ASSIGN_OR_RETURN(std::string name, LegacyTransportName(proto.transport()));
  if (proto.transport() != v1::TRANSPORT_UNSPECIFIED) {
    WSYNC_LOG(Warning, "group '", proto.name(), "': the admin API's GroupSpec.transport enum is ",
              "deprecated; send transport_name \"", name, "\"");
  }
  return name;
}

}  // namespace

absl::StatusOr<GroupSpec> GroupSpecFromProto(const v1::GroupSpec& proto) {
  GroupSpec spec;
  spec.name = proto.name();
  WSYNC_ASSIGN_OR_RETURN(spec.kind, KindFromProto(proto));
  WSYNC_ASSIGN_OR_RETURN(spec.transport, TransportFromProto(proto));
  spec.device = proto.device();
  spec.nccl_library = proto.nccl_library();
  spec.check_weights = proto.check_weights();
  spec.quorum = proto.quorum();
  for (const v1::EngineSpec& e : proto.engines()) {
    spec.engines.push_back(EngineSpec{e.url(), e.ranks() == 0 ? 1u : e.ranks(),
                                      std::vector<std::string>(e.gpus().begin(), e.gpus().end())});
  }
  WSYNC_ASSIGN_OR_RETURN(spec.engine_options, OptionsFromProto(proto, spec));
  return spec;
}

void GroupSpecToProto(const GroupSpec& spec, v1::GroupSpec* out) {
  out->set_name(spec.name);
  out->set_kind_name(spec.kind);
  out->set_kind(LegacyKindOf(spec.kind));
  out->set_device(spec.device);
  out->set_nccl_library(spec.nccl_library);
  out->set_check_weights(spec.check_weights);
  out->set_quorum(spec.quorum);
  out->set_transport_name(spec.transport);
  out->set_transport(LegacyTransportOf(spec.transport));
  for (const EngineSpec& e : spec.engines) {
    auto* engine = out->add_engines();
    engine->set_url(e.url);
    engine->set_ranks(e.ranks);
    for (const std::string& gpu : e.gpus) engine->add_gpus(gpu);
  }
  if (auto options = EngineOptionsToJson(spec); options.ok()) {
    out->set_engine_options_json(options->dump());
    SetLegacyOptions(spec.kind, *options, out);
  }
}

void GroupToProto(const GroupSnapshot& group, v1::GroupInfo* out) {
  GroupSpecToProto(group.spec, out->mutable_spec());
  out->set_state(StateToProto(group.state));
  out->set_world_size(group.world_size);
  out->set_rendezvous(group.rendezvous);
  out->set_last_version(group.last_version);
  out->set_error(group.error);
  out->set_updates(group.updates);
  out->set_bucket_rules(group.bucket_rules.Describe());
  for (const EngineEndpoint& e : group.endpoints) {
    auto* info = out->add_engines();
    info->set_url(e.url);
    info->set_ranks(e.ranks);
    info->set_rank_offset(e.rank_offset);
    info->set_group(group.spec.name);
    if (auto it = group.needs_full_version.find(e.url); it != group.needs_full_version.end()) {
      info->set_needs_full_version(true);
      info->set_needs_full_version_reason(it->second);
    }
  }
}

}  // namespace wsync
