#include "daemon/service/legacy_engine_options.h"

#include "absl/strings/str_cat.h"

namespace wsync {
namespace {

std::string SglangFormat(v1::SglangLoadFormat f) {
  return f == v1::SGLANG_LOAD_FORMAT_PER_TENSOR ? "per_tensor" : "flattened_bucket";
}

absl::StatusOr<nlohmann::json> SglangJson(const v1::SglangOptions& o) {
  if (!v1::SglangLoadFormat_IsValid(o.load_format())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown sglang load_format ", static_cast<int>(o.load_format())));
  }
  if (o.memory() != v1::SGLANG_MEMORY_KEEP && o.memory() != v1::SGLANG_MEMORY_RESUME) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown sglang memory ", static_cast<int>(o.memory())));
  }
  if (o.ipc_route() != v1::SGLANG_IPC_ROUTE_TENSOR && o.ipc_route() != v1::SGLANG_IPC_ROUTE_IPC) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown sglang ipc_route ", static_cast<int>(o.ipc_route())));
  }
  return nlohmann::json{
      {"load_format", SglangFormat(o.load_format())},
      {"memory", o.memory() == v1::SGLANG_MEMORY_RESUME ? "resume" : "keep"},
      {"ipc_route", o.ipc_route() == v1::SGLANG_IPC_ROUTE_IPC ? "ipc" : "tensor"}};
}

absl::StatusOr<nlohmann::json> LmdeployJson(const v1::LmdeployOptions& o) {
  if (!v1::LmdeployLoadFormat_IsValid(o.load_format())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown lmdeploy load_format ", static_cast<int>(o.load_format())));
  }
  return nlohmann::json{{"load_format", o.load_format() == v1::LMDEPLOY_LOAD_FORMAT_PER_TENSOR
                                            ? "per_tensor"
                                            : "flattened_bucket"}};
}

absl::StatusOr<nlohmann::json> VllmJson(const v1::VllmOptions& o) {
  std::string pause;
  switch (o.pause_mode()) {
    case v1::VLLM_PAUSE_MODE_UNSPECIFIED:
    case v1::VLLM_PAUSE_MODE_KEEP:
      pause = "keep";
      break;
    case v1::VLLM_PAUSE_MODE_WAIT:
      pause = "wait";
      break;
    case v1::VLLM_PAUSE_MODE_ABORT:
      pause = "abort";
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown vllm pause_mode ", static_cast<int>(o.pause_mode())));
  }
  if (!v1::VllmRendezvous_IsValid(o.rendezvous())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown vllm rendezvous ", static_cast<int>(o.rendezvous())));
  }
  nlohmann::json j = {
      {"packed", o.packed()},
      {"pause_mode", pause},
      {"wake_weights", o.wake_weights()},
      {"reset_prefix_cache", !o.keep_prefix_cache()},
      {"rendezvous", o.rendezvous() == v1::VLLM_RENDEZVOUS_UNIQUE_ID ? "unique-id" : "store"}};
  if (o.packed_chunk_bytes() != 0) j["packed_chunk_bytes"] = o.packed_chunk_bytes();
  return j;
}

}  // namespace

absl::StatusOr<std::string> LegacyKindName(v1::EngineKind kind) {
  switch (kind) {
    case v1::ENGINE_KIND_SGLANG:
      return std::string("sglang");
    case v1::ENGINE_KIND_VLLM:
      return std::string("vllm");
    case v1::ENGINE_KIND_LMDEPLOY:
      return std::string("lmdeploy");
    default:
      return absl::InvalidArgumentError("engine kind is required (kind_name)");
  }
}

v1::EngineKind LegacyKindOf(absl::string_view name) {
  if (name == "sglang") return v1::ENGINE_KIND_SGLANG;
  if (name == "vllm") return v1::ENGINE_KIND_VLLM;
  if (name == "lmdeploy") return v1::ENGINE_KIND_LMDEPLOY;
  return v1::ENGINE_KIND_UNSPECIFIED;
}

absl::StatusOr<std::string> LegacyTransportName(v1::Transport transport) {
  switch (transport) {
    case v1::TRANSPORT_UNSPECIFIED:
    case v1::TRANSPORT_BROADCAST:
      return std::string("broadcast");
    case v1::TRANSPORT_IPC:
      return std::string("ipc");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown transport ", static_cast<int>(transport)));
  }
}

v1::Transport LegacyTransportOf(absl::string_view name) {
  if (name == "broadcast") return v1::TRANSPORT_BROADCAST;
  if (name == "ipc") return v1::TRANSPORT_IPC;
  return v1::TRANSPORT_UNSPECIFIED;
}

absl::StatusOr<nlohmann::json> LegacyOptionsJson(const v1::GroupSpec& proto,
                                                 std::string* options_kind) {
  switch (proto.engine_options_case()) {
    case v1::GroupSpec::kSglang:
      *options_kind = "sglang";
      return SglangJson(proto.sglang());
    case v1::GroupSpec::kLmdeploy:
      *options_kind = "lmdeploy";
      return LmdeployJson(proto.lmdeploy());
    case v1::GroupSpec::kVllm:
      *options_kind = "vllm";
      return VllmJson(proto.vllm());
    default:
      return absl::InvalidArgumentError("no typed engine options are set");
  }
}

void SetLegacyOptions(absl::string_view kind, const nlohmann::json& o, v1::GroupSpec* out) {
  auto text = [&](const char* key, const char* fallback) {
    const nlohmann::json v = o.value(key, nlohmann::json(fallback));
    const std::string s = v.is_string() ? v.get<std::string>() : std::string(fallback);
    // "null" is the engines' own spelling of one view per tensor.
    return s == "null" ? std::string("per_tensor") : s;
  };
  auto flag = [&](const char* key, bool fallback) {
    const nlohmann::json v = o.value(key, nlohmann::json(fallback));
    return v.is_boolean() ? v.get<bool>() : fallback;
  };
  if (kind == "sglang") {
    v1::SglangOptions* s = out->mutable_sglang();
    s->set_load_format(text("load_format", "flattened_bucket") == "per_tensor"
                           ? v1::SGLANG_LOAD_FORMAT_PER_TENSOR
                           : v1::SGLANG_LOAD_FORMAT_FLATTENED_BUCKET);
    s->set_memory(text("memory", "keep") == "resume" ? v1::SGLANG_MEMORY_RESUME
                                                     : v1::SGLANG_MEMORY_KEEP);
    s->set_ipc_route(text("ipc_route", "tensor") == "ipc" ? v1::SGLANG_IPC_ROUTE_IPC
                                                          : v1::SGLANG_IPC_ROUTE_TENSOR);
  } else if (kind == "lmdeploy") {
    out->mutable_lmdeploy()->set_load_format(text("load_format", "flattened_bucket") == "per_tensor"
                                                 ? v1::LMDEPLOY_LOAD_FORMAT_PER_TENSOR
                                                 : v1::LMDEPLOY_LOAD_FORMAT_FLATTENED_BUCKET);
  } else if (kind == "vllm") {
    v1::VllmOptions* v = out->mutable_vllm();
    v->set_packed(flag("packed", false));
    const std::string pause = text("pause_mode", "keep");
    v->set_pause_mode(pause == "wait"    ? v1::VLLM_PAUSE_MODE_WAIT
                      : pause == "abort" ? v1::VLLM_PAUSE_MODE_ABORT
                                         : v1::VLLM_PAUSE_MODE_KEEP);
    v->set_wake_weights(flag("wake_weights", false));
    v->set_keep_prefix_cache(!flag("reset_prefix_cache", true));
    v->set_rendezvous(text("rendezvous", "store") == "unique-id" ? v1::VLLM_RENDEZVOUS_UNIQUE_ID
                                                                 : v1::VLLM_RENDEZVOUS_STORE);
    const nlohmann::json chunk = o.value("packed_chunk_bytes", nlohmann::json(0));
    v->set_packed_chunk_bytes(chunk.is_number_unsigned() ? chunk.get<uint64_t>() : 0);
  }
}

}  // namespace wsync
