#include "daemon/service/group_spec_proto.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/engines/engine_options.h"
#include "daemon/engines/lmdeploy/lmdeploy_options.h"
#include "daemon/engines/sglang/sglang_options.h"
#include "daemon/engines/vllm/vllm_options.h"

namespace wsync {
namespace {

v1::EngineKind KindToProto(EngineKind kind) {
  switch (kind) {
    case EngineKind::kSglang:
      return v1::ENGINE_KIND_SGLANG;
    case EngineKind::kVllm:
      return v1::ENGINE_KIND_VLLM;
    case EngineKind::kLmdeploy:
      return v1::ENGINE_KIND_LMDEPLOY;
  }
  return v1::ENGINE_KIND_UNSPECIFIED;
}

absl::StatusOr<EngineKind> KindFromProto(v1::EngineKind kind) {
  switch (kind) {
    case v1::ENGINE_KIND_SGLANG:
      return EngineKind::kSglang;
    case v1::ENGINE_KIND_VLLM:
      return EngineKind::kVllm;
    case v1::ENGINE_KIND_LMDEPLOY:
      return EngineKind::kLmdeploy;
    default:
      return absl::InvalidArgumentError("engine kind is required (sglang, vllm, lmdeploy)");
  }
}

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

absl::StatusOr<std::shared_ptr<const EngineOptions>> SglangFromProto(
    const v1::SglangOptions& proto) {
  SglangMemory memory;
  switch (proto.memory()) {
    case v1::SGLANG_MEMORY_KEEP:
      memory = SglangMemory::kKeep;
      break;
    case v1::SGLANG_MEMORY_RESUME:
      memory = SglangMemory::kResume;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown sglang memory ", static_cast<int>(proto.memory())));
  }
  SglangIpcRoute route;
  switch (proto.ipc_route()) {
    case v1::SGLANG_IPC_ROUTE_TENSOR:
      route = SglangIpcRoute::kTensor;
      break;
    case v1::SGLANG_IPC_ROUTE_IPC:
      route = SglangIpcRoute::kIpc;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown sglang ipc_route ", static_cast<int>(proto.ipc_route())));
  }
  switch (proto.load_format()) {
    case v1::SGLANG_LOAD_FORMAT_UNSPECIFIED:
    case v1::SGLANG_LOAD_FORMAT_FLATTENED_BUCKET:
      return std::make_shared<const SglangOptions>(BucketFormat::kFlattened, memory, route);
    case v1::SGLANG_LOAD_FORMAT_PER_TENSOR:
      return std::make_shared<const SglangOptions>(BucketFormat::kPerTensor, memory, route);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown sglang load_format ", static_cast<int>(proto.load_format())));
  }
}

absl::StatusOr<std::shared_ptr<const EngineOptions>> LmdeployFromProto(
    const v1::LmdeployOptions& proto) {
  switch (proto.load_format()) {
    case v1::LMDEPLOY_LOAD_FORMAT_UNSPECIFIED:
    case v1::LMDEPLOY_LOAD_FORMAT_FLATTENED_BUCKET:
      return std::make_shared<const LmdeployOptions>(BucketFormat::kFlattened);
    case v1::LMDEPLOY_LOAD_FORMAT_PER_TENSOR:
      return std::make_shared<const LmdeployOptions>(BucketFormat::kPerTensor);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown lmdeploy load_format ", static_cast<int>(proto.load_format())));
  }
}

absl::StatusOr<std::shared_ptr<const EngineOptions>> VllmFromProto(const v1::VllmOptions& proto) {
  VllmPauseMode pause;
  switch (proto.pause_mode()) {
    case v1::VLLM_PAUSE_MODE_UNSPECIFIED:
    case v1::VLLM_PAUSE_MODE_KEEP:
      pause = VllmPauseMode::kKeep;
      break;
    case v1::VLLM_PAUSE_MODE_WAIT:
      pause = VllmPauseMode::kWait;
      break;
    case v1::VLLM_PAUSE_MODE_ABORT:
      pause = VllmPauseMode::kAbort;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown vllm pause_mode ", static_cast<int>(proto.pause_mode())));
  }
  VllmRendezvous rendezvous;
  switch (proto.rendezvous()) {
    case v1::VLLM_RENDEZVOUS_UNSPECIFIED:
    case v1::VLLM_RENDEZVOUS_STORE:
      rendezvous = VllmRendezvous::kStore;
      break;
    case v1::VLLM_RENDEZVOUS_UNIQUE_ID:
      rendezvous = VllmRendezvous::kUniqueId;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown vllm rendezvous ", static_cast<int>(proto.rendezvous())));
  }
  return std::make_shared<const VllmOptions>(
      proto.packed(), pause, proto.wake_weights(), !proto.keep_prefix_cache(), rendezvous,
      proto.packed_chunk_bytes() == 0 ? kVllmDefaultPackedChunkBytes : proto.packed_chunk_bytes());
}

v1::VllmPauseMode VllmPauseModeToProto(VllmPauseMode mode) {
  switch (mode) {
    case VllmPauseMode::kKeep:
      return v1::VLLM_PAUSE_MODE_KEEP;
    case VllmPauseMode::kWait:
      return v1::VLLM_PAUSE_MODE_WAIT;
    case VllmPauseMode::kAbort:
      return v1::VLLM_PAUSE_MODE_ABORT;
  }
  return v1::VLLM_PAUSE_MODE_UNSPECIFIED;
}

// INVALID_ARGUMENT when a spec of `kind` carries the options of `options_kind`.
absl::Status OptionsMatchKind(const GroupSpec& spec, EngineKind options_kind) {
  if (spec.kind == options_kind) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("group '", spec.name, "' is of kind ",
                                                 EngineKindName(spec.kind), " but carries ",
                                                 EngineKindName(options_kind), " options"));
}

}  // namespace

absl::StatusOr<GroupSpec> GroupSpecFromProto(const v1::GroupSpec& proto) {
  GroupSpec spec;
  spec.name = proto.name();
  WSYNC_ASSIGN_OR_RETURN(spec.kind, KindFromProto(proto.kind()));
  switch (proto.transport()) {
    case v1::TRANSPORT_UNSPECIFIED:
    case v1::TRANSPORT_BROADCAST:
      spec.transport = TransportKind::kBroadcast;
      break;
    case v1::TRANSPORT_IPC:
      spec.transport = TransportKind::kIpc;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown transport ", static_cast<int>(proto.transport())));
  }
  spec.device = proto.device();
  spec.nccl_library = proto.nccl_library();
  spec.check_weights = proto.check_weights();
  spec.quorum = proto.quorum();
  for (const v1::EngineSpec& e : proto.engines()) {
    spec.engines.push_back(EngineSpec{e.url(), e.ranks() == 0 ? 1u : e.ranks(),
                                      std::vector<std::string>(e.gpus().begin(), e.gpus().end())});
  }
  switch (proto.engine_options_case()) {
    case v1::GroupSpec::kSglang: {
      WSYNC_RETURN_IF_ERROR(OptionsMatchKind(spec, EngineKind::kSglang));
      WSYNC_ASSIGN_OR_RETURN(spec.engine_options, SglangFromProto(proto.sglang()));
      break;
    }
    case v1::GroupSpec::kLmdeploy: {
      WSYNC_RETURN_IF_ERROR(OptionsMatchKind(spec, EngineKind::kLmdeploy));
      WSYNC_ASSIGN_OR_RETURN(spec.engine_options, LmdeployFromProto(proto.lmdeploy()));
      break;
    }
    case v1::GroupSpec::kVllm: {
      WSYNC_RETURN_IF_ERROR(OptionsMatchKind(spec, EngineKind::kVllm));
      WSYNC_ASSIGN_OR_RETURN(spec.engine_options, VllmFromProto(proto.vllm()));
      break;
    }
    case v1::GroupSpec::ENGINE_OPTIONS_NOT_SET: {
      WSYNC_ASSIGN_OR_RETURN(spec.engine_options, DefaultEngineOptions(spec.kind));
      break;
    }
  }
  return spec;
}

void GroupSpecToProto(const GroupSpec& spec, v1::GroupSpec* out) {
  out->set_name(spec.name);
  out->set_kind(KindToProto(spec.kind));
  out->set_device(spec.device);
  out->set_nccl_library(spec.nccl_library);
  out->set_check_weights(spec.check_weights);
  out->set_quorum(spec.quorum);
  out->set_transport(spec.transport == TransportKind::kIpc ? v1::TRANSPORT_IPC
                                                           : v1::TRANSPORT_BROADCAST);
  for (const EngineSpec& e : spec.engines) {
    auto* engine = out->add_engines();
    engine->set_url(e.url);
    engine->set_ranks(e.ranks);
    for (const std::string& gpu : e.gpus) engine->add_gpus(gpu);
  }
  if (const auto* sglang = dynamic_cast<const SglangOptions*>(spec.engine_options.get())) {
    out->mutable_sglang()->set_load_format(sglang->load_format() == BucketFormat::kPerTensor
                                               ? v1::SGLANG_LOAD_FORMAT_PER_TENSOR
                                               : v1::SGLANG_LOAD_FORMAT_FLATTENED_BUCKET);
    out->mutable_sglang()->set_memory(sglang->memory() == SglangMemory::kResume
                                          ? v1::SGLANG_MEMORY_RESUME
                                          : v1::SGLANG_MEMORY_KEEP);
    out->mutable_sglang()->set_ipc_route(sglang->ipc_route() == SglangIpcRoute::kIpc
                                             ? v1::SGLANG_IPC_ROUTE_IPC
                                             : v1::SGLANG_IPC_ROUTE_TENSOR);
  }
  if (const auto* lmdeploy = dynamic_cast<const LmdeployOptions*>(spec.engine_options.get())) {
    out->mutable_lmdeploy()->set_load_format(lmdeploy->load_format() == BucketFormat::kPerTensor
                                                 ? v1::LMDEPLOY_LOAD_FORMAT_PER_TENSOR
                                                 : v1::LMDEPLOY_LOAD_FORMAT_FLATTENED_BUCKET);
  }
  if (const auto* vllm = dynamic_cast<const VllmOptions*>(spec.engine_options.get())) {
    v1::VllmOptions* o = out->mutable_vllm();
    o->set_packed(vllm->packed());
    o->set_pause_mode(VllmPauseModeToProto(vllm->pause_mode()));
    o->set_wake_weights(vllm->wake_weights());
    o->set_keep_prefix_cache(!vllm->reset_prefix_cache());
    o->set_rendezvous(vllm->rendezvous() == VllmRendezvous::kUniqueId
                          ? v1::VLLM_RENDEZVOUS_UNIQUE_ID
                          : v1::VLLM_RENDEZVOUS_STORE);
    o->set_packed_chunk_bytes(vllm->packed_chunk_bytes());
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
