#include "daemon/engines/sglang/sglang_adapter.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"
#include "daemon/engines/sglang/sglang_broadcast_binding.h"
#include "daemon/engines/sglang/sglang_ipc_binding.h"
#include "daemon/engines/sglang/sglang_ipc_stream_binding.h"
#include "daemon/engines/weight_checker.h"

namespace wsync {
SglangAdapter::SglangAdapter(EngineEndpoint endpoint, AdapterTimeouts timeouts,
                             SglangOptions options, absl::string_view data_path)
    : endpoint_(std::move(endpoint)),
      timeouts_(timeouts),
      format_(options.load_format()),
      memory_(options.memory()),
      route_(options.ipc_route()),
      http_(endpoint_.url),
      broadcast_(std::make_unique<SglangBroadcastBinding>(*this)) {
  // The group's route picks how IPC buckets travel (sglang_options.h).
  if (route_ == SglangIpcRoute::kIpc) {
    stream_ = std::make_unique<SglangIpcStreamBinding>(*this);
  } else {
    ipc_ = std::make_unique<SglangIpcBinding>(*this);
  }
  if (!options.engine_version().empty()) {
    // Checked when the group's options were read.
    auto forced = ParseEngineVersionOption("sglang", options.engine_version());
    if (forced.ok()) forced_version_ = *forced;
  }
  if (!data_path.empty()) (void)UseDataPath(data_path);
}

SglangAdapter::~SglangAdapter() = default;

AdapterCapabilities SglangAdapter::Capabilities() const {
  // The flattened receiver since PR #13413 takes mixed dtypes as uint8 bytes; per tensor, every
  // tensor has its own typed broadcast. Alignment is the planner's own rule.
  return AdapterCapabilities{};
}

DataPathBinding* SglangAdapter::Binding(absl::string_view data_path) {
  if (data_path == kBroadcastDataPath) return broadcast_.get();
  if (data_path == kCudaIpcDataPath) return ipc_.get();
  if (data_path == kCudaIpcStreamDataPath) return stream_.get();
  return nullptr;
}

absl::Status SglangAdapter::UseDataPath(absl::string_view data_path) {
  WSYNC_RETURN_IF_ERROR(EngineAdapter::UseDataPath(data_path));
  path_ = dynamic_cast<SglangPath*>(used_binding());
  return absl::OkStatus();
}

absl::Status SglangAdapter::Probe() {
  WSYNC_ASSIGN_OR_RETURN(nlohmann::json info, http_.GetJson("/get_server_info", timeouts_.probe));
  WSYNC_RETURN_IF_ERROR(CheckServerInfo(info, endpoint_));
  // Its server info is an SGLang server's: its refusals' reasons reach callers from now on.
  http_.EngineIdentified();
  if (path_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine ", endpoint_.url, ": no data path was picked for it"));
  }
  // Read again at each formation, like the version: a server may be replaced by another build.
  auto routes = ProbeSglangRoutes(http_, endpoint_.url, NeededRoutes(), timeouts_.probe);
  if (!routes.ok()) {
    return absl::Status(routes.status().code(),
                        absl::StrCat("engine ", endpoint_.url, ": ", routes.status().message()));
  }
  if (!routes->missing.empty()) {
    const nlohmann::json& version = info["version"];
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", endpoint_.url, " (SGLang ",
        version.is_string() ? SanitizePeerText(version.get<std::string>(), kMaxVersionBytes)
                            : std::string("of no version it reports"),
        "): it serves no POST ", absl::StrJoin(routes->missing, ", no POST "),
        " (its OpenAPI document does not list them, and asked with OPTIONS the server does not "
        "serve them either), which every update of this group calls: refused before any byte is "
        "sent (a build without these routes, or a proxy in front that does not pass them)"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (routes->sessions != sessions_) {
      WSYNC_LOG(Info, "engine ", endpoint_.url,
                routes->sessions ? ": weight-update sessions (begin/end around every update)"
                                 : ": no weight-update sessions");
    }
    sessions_ = routes->sessions;
    documented_ = routes->documented;
    const bool in_request = routes->version_route == false;
    if (in_request && version_route_ != false) {
      WSYNC_LOG(Info, "engine ", endpoint_.url,
                ": serves no /update_weight_version; the version goes in the last bucket's "
                "request (weight_version) instead");
    }
    version_route_ = routes->version_route;
  }
  return path_->ProbeServer(info);
}

std::vector<std::string> SglangAdapter::NeededRoutes() const {
  std::vector<std::string> routes = {path_->bucket_path(), "/pause_generation",
                                     "/continue_generation", "/flush_cache"};
  if (path_ == broadcast_.get()) routes.push_back("/init_weights_update_group");
  if (memory_ == SglangMemory::kResume) routes.push_back("/resume_memory_occupation");
  return routes;
}

bool SglangAdapter::FlushRidesLocked() const {
  return memory_ != SglangMemory::kResume && !sessions_;
}

void SglangAdapter::LabelRequest(const std::string& version, bool last,
                                 nlohmann::json* body) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!last) return;
  (*body)["weight_version"] = version;
  last_bucket_ = LastBucket{true, FlushRidesLocked(), false};
  if (last_bucket_.flush_sent) (*body)["flush_cache"] = true;
}

SglangAdapter::LastBucket SglangAdapter::TakeLastBucket() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(last_bucket_, LastBucket{});
}

std::vector<std::string> SglangAdapter::TakeCommitWarnings() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> taken;
  taken.swap(commit_warnings_);
  return taken;
}

void SglangAdapter::RecordVersionLabel(const UpdateInfo& update, const LastBucket& last) {
  // The server said, answering the last bucket, that it recorded the label.
  if (last.label_sent && last.label_taken) return;
  bool in_request;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_request = version_route_ == false;
  }
  const bool sent = last.label_sent;
  std::string warning;
  if (in_request) {
    if (!sent) {
      warning = absl::StrCat(
          "version '", update.version,
          "' committed without its label: the server serves no /update_weight_version and the "
          "trainer did not mark its last bucket (the label rides on it), so /get_server_info "
          "still reports the previous weight_version");
    } else {
      warning = CheckLabelTaken(update.version);
    }
  } else {
    absl::Status labelled =
        http_
            .PostExpectSuccess("/update_weight_version",
                               {{"new_version", update.version}, {"abort_all_requests", false}},
                               timeouts_.control)
            .status();
    if (!labelled.ok()) {
      warning = absl::StrCat(
          "version '", update.version,
          "' committed (every byte landed), but its label was not set: ", labelled.message());
    }
  }
  if (warning.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  commit_warnings_.push_back(std::move(warning));
}

std::string SglangAdapter::CheckLabelTaken(const std::string& version) const {
  // A build without /update_weight_version may also ignore weight_version in update requests: the
  // label is read back, and a server that reports another one is named (one that reports none
  // has no label to be wrong).
  auto info = http_.GetJson("/get_server_info", timeouts_.control);
  if (!info.ok()) {
    return absl::StrCat("version '", version,
                        "' committed (every byte landed) with its label in the last bucket's "
                        "request, but reading it back failed: ",
                        info.status().message());
  }
  const nlohmann::json& reported = (*info)["weight_version"];
  if (!reported.is_string() || reported.get<std::string>() == version) return "";
  return absl::StrCat(
      "version '", version,
      "' committed (every byte landed), but the server ignored the label in its last bucket's "
      "request: /get_server_info reports weight_version '",
      SanitizePeerText(reported.get<std::string>(), kMaxVersionBytes),
      "' (a build with neither /update_weight_version nor weight_version in update requests)");
}

absl::Status SglangIpcPath::ProbeServer(const nlohmann::json& info) {
  return adapter_.ProbeIpcVersion(info);
}

void SglangIpcPath::AddHealth(const nlohmann::json& info, EngineHealth* health) const {
  adapter_.AddIpcHealth(info, health);
}

absl::StatusOr<std::pair<SglangVersion, SglangIpcVariant>> SglangAdapter::CheckOwnIpcVersion(
    const nlohmann::json& info) const {
  bool documented;
  {
    std::lock_guard<std::mutex> lock(mu_);
    documented = documented_;
  }
  return CheckIpcVersion(info, endpoint_.url, format_, route_,
                         forced_version_ ? &*forced_version_ : nullptr, documented);
}

absl::Status SglangAdapter::ProbeIpcVersion(const nlohmann::json& info) {
  // Each formation reads the version again: the engine behind the URL may have been upgraded.
  WSYNC_ASSIGN_OR_RETURN(auto found, CheckOwnIpcVersion(info));
  auto& [version, variant] = found;
  std::lock_guard<std::mutex> lock(mu_);
  if (!ipc_variant_.has_value() || ipc_variant_->name != variant.name ||
      version_text_ != version.text) {
    WSYNC_LOG(Info, "engine ", endpoint_.url, ": SGLang ", version.Described(), ", ", variant.name);
  }
  ipc_variant_ = variant;
  version_text_ = version.text;
  return absl::OkStatus();
}

void SglangAdapter::AddIpcHealth(const nlohmann::json& info, EngineHealth* health) const {
  auto found = CheckOwnIpcVersion(info);
  if (found.ok()) {
    health->variant = found->second.name;
  } else {
    health->variant = "unsupported";
    health->error = std::string(found.status().message());
  }
}

std::string SglangAdapter::probed_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_text_;
}

absl::StatusOr<WeightChecksums> SglangAdapter::ChecksumWeights() {
  return AskSglangWeightChecker(http_, endpoint_.url, timeouts_.checksum);
}

bool SglangAdapter::sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sessions_;
}

std::optional<SglangIpcVariant> SglangAdapter::ipc_variant() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ipc_variant_;
}

absl::StatusOr<std::pair<SglangVersion, SglangIpcVariant>> SglangAdapter::CheckIpcVersion(
    const nlohmann::json& info, const std::string& url, BucketFormat format, SglangIpcRoute route,
    const SglangVersion* forced, bool route_documented) {
  auto field = info.find("version");
  if (field == info.end() || !field->is_string()) {
    return absl::FailedPreconditionError(absl::StrCat(
        url,
        "/get_server_info answered without a \"version\" string, and the colocated payload "
        "depends on it: not an SGLang server wsyncd knows"));
  }
  const std::string text = field->get<std::string>();
  auto version = ParseSglangVersion(text);
  if (!version.ok()) {
    // The engine's text is not echoed: a version wsyncd cannot read says nothing useful.
    return absl::FailedPreconditionError(
        absl::StrCat(url, "/get_server_info answered a version wsyncd cannot read (", text.size(),
                     " characters, not MAJOR.MINOR.PATCH): not an SGLang server wsyncd knows"));
  }
  const SglangVersion gate = GateVersion(*version, forced);
  auto variant = route == SglangIpcRoute::kIpc ? SglangIpcRouteVariantFor(gate, route_documented)
                                               : SglangIpcVariantFor(gate, format);
  if (!variant.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", url, ": ", variant.status().message(), EngineVersionOverrideHint(*version)));
  }
  return std::make_pair(gate, *std::move(variant));
}

absl::Status SglangAdapter::CheckServerInfo(const nlohmann::json& info,
                                            const EngineEndpoint& endpoint) {
  // Sizes are read only when they are integers: json::value() throws on a string and casts a
  // float, and whatever answers at the URL (an engine, or a service a group was pointed at) must
  // not stop wsyncd with an exception or undefined behaviour.
  int64_t sizes[2] = {0, 1};
  const char* keys[2] = {"tp_size", "pp_size"};
  for (int i = 0; i < 2; ++i) {
    if (!info.contains(keys[i])) continue;
    const nlohmann::json& v = info[keys[i]];
    if (!v.is_number_integer()) {
      return absl::FailedPreconditionError(
          absl::StrCat("engine ", endpoint.url, " answered /get_server_info with a ", keys[i],
                       " that is not an integer: not an SGLang server"));
    }
    sizes[i] = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{1} << 32 ? int64_t{1} << 32
                                                                               : v.get<int64_t>();
  }
  if (sizes[0] != 0 && sizes[0] != static_cast<int64_t>(endpoint.ranks)) {
    return absl::FailedPreconditionError(absl::StrCat("engine ", endpoint.url, " runs tp_size ",
                                                      sizes[0], " but the group declares ",
                                                      endpoint.ranks, " ranks for it"));
  }
  if (sizes[1] > 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine ", endpoint.url,
                     " runs pp_size > 1, which SGLang's weight-update group does not "
                     "rank correctly"));
  }
  return absl::OkStatus();
}

absl::Status SglangAdapter::PauseGeneration() {
  // retract keeps requests and lets the KV cache be flushed at commit (abort would drop them;
  // in_place forbids flushing).
  return http_.PostExpectSuccess("/pause_generation", {{"mode", "retract"}}, timeouts_.control)
      .status();
}

absl::Status SglangAdapter::EndSession() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!session_open_) return absl::OkStatus();
  }
  WSYNC_RETURN_IF_ERROR(
      http_.PostExpectSuccess("/end_weight_update", nlohmann::json::object(), timeouts_.control)
          .status());
  std::lock_guard<std::mutex> lock(mu_);
  session_open_ = false;
  return absl::OkStatus();
}

absl::Status SglangAdapter::BeginUpdate(const UpdateInfo& update) {
  {
    // A label an aborted update's last bucket carried says nothing of this one.
    std::lock_guard<std::mutex> lock(mu_);
    last_bucket_ = LastBucket{};
  }
  WSYNC_RETURN_IF_ERROR(ResumeWeights());
  bool sessions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions = sessions_;
  }
  if (!sessions) return absl::OkStatus();
  // A session a failed end left open would make this begin the server's second: end it first.
  WSYNC_RETURN_IF_ERROR(EndSession());
  WSYNC_RETURN_IF_ERROR(
      http_.PostExpectSuccess("/begin_weight_update", {{"selector", "all"}}, timeouts_.control)
          .status());
  std::lock_guard<std::mutex> lock(mu_);
  session_open_ = true;
  return absl::OkStatus();
}

absl::Status SglangAdapter::ResumeWeights() {
  if (memory_ != SglangMemory::kResume) return absl::OkStatus();
  absl::Status resumed = http_.PostExpectStatus("/resume_memory_occupation",
                                                {{"tags", {"weights"}}}, timeouts_.control);
  if (!resumed.ok()) {
    // Whether the weights are released now is unknown (SGLang answers the same for "not
    // released" and a failed resume): generation must not resume on memory that may be gone.
    {
      std::lock_guard<std::mutex> lock(mu_);
      weights_unknown_ = true;
    }
    return absl::Status(
        resumed.code(),
        absl::StrCat(resumed.message(),
                     "; with sglang memory \"resume\" the engine's memory must be released "
                     "(POST /release_memory_occupation) before every update, as colocated "
                     "training does, and SGLang refuses to resume weights it holds"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  kv_cache_released_ = true;
  weights_unknown_ = false;
  return absl::OkStatus();
}

absl::Status SglangAdapter::ResumeKvCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!kv_cache_released_) return absl::OkStatus();
  }
  WSYNC_RETURN_IF_ERROR(http_.PostExpectStatus("/resume_memory_occupation",
                                               {{"tags", {"kv_cache"}}}, timeouts_.control));
  std::lock_guard<std::mutex> lock(mu_);
  kv_cache_released_ = false;
  return absl::OkStatus();
}

void SglangAdapter::AbandonUpdate() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_bucket_ = LastBucket{};
  }
  if (absl::Status ended = EndSession(); !ended.ok()) {
    WSYNC_LOG(Warning, "engine ", endpoint_.url,
              ": ending its weight-update session failed: ", ended.message());
  }
}

absl::Status SglangAdapter::ResumeGeneration() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (weights_unknown_) {
      // Refused once, for the resume that follows the failure; an operator's later resume (or
      // the next update's) goes through.
      weights_unknown_ = false;
      return absl::FailedPreconditionError(absl::StrCat(
          "engine ", endpoint_.url,
          " stays paused: resuming its weights' memory failed, so they may be released; once "
          "its memory is resumed, resume it by hand (wsyncctl resume-engine GROUP --engine ",
          endpoint_.url, ") or let the next update do it"));
    }
  }
  // An aborted update resumes here: its session ends first (best effort: a server that cannot end
  // it keeps it marked open, and the next update ends it before its begin), then generation needs
  // its KV cache back.
  if (absl::Status ended = EndSession(); !ended.ok()) {
    WSYNC_LOG(Warning, "engine ", endpoint_.url,
              ": ending its weight-update session failed: ", ended.message());
  }
  WSYNC_RETURN_IF_ERROR(ResumeKvCache());
  return http_
      .PostExpectSuccess("/continue_generation", nlohmann::json::object(), timeouts_.control)
      .status();
}

absl::Status SglangAdapter::CheckBucketReply(const HttpReply& reply) const {
  // Every bucket route answers {"success", "message"}.
  if (path_ == nullptr) return absl::InternalError("no data path was picked");
  WSYNC_ASSIGN_OR_RETURN(const nlohmann::json answer,
                         http_.ExpectSuccess(path_->bucket_path(), reply));
  // SGLang records a request's weight_version only once the request succeeded, and then appends
  // this to its message; a build that ignores the field says nothing of it.
  const nlohmann::json& message =
      answer.is_object() && answer.contains("message") ? answer["message"] : nlohmann::json();
  if (message.is_string() &&
      absl::StrContains(message.get<std::string>(), "Weight version updated to")) {
    std::lock_guard<std::mutex> lock(mu_);
    if (last_bucket_.label_sent) last_bucket_.label_taken = true;
  }
  return absl::OkStatus();
}

absl::Status SglangAdapter::FinishUpdate(const UpdateInfo& update) {
  // Every bucket was loaded, so the engine holds the whole version: each step is tried even when
  // an earlier one failed, and the engine resumes generation rather than waiting, paused, for an
  // update that may not come. The first failure is the update's. The session ends first (the
  // server may finish loading there); if it cannot, the version is not recorded. The label never
  // fails the update: the weights are in (RecordVersionLabel warns instead).
  const LastBucket last = TakeLastBucket();
  absl::Status first = EndSession();
  if (first.ok()) RecordVersionLabel(update, last);
  // The KV cache is back before it is flushed and generation resumes; without it the engine
  // cannot generate, so it stays paused.
  absl::Status kv = ResumeKvCache();
  if (!kv.ok()) return first.ok() ? kv : first;
  // The last bucket's request flushed the cache if its answer, which also says the label was
  // recorded, came back a success; a server that ignored both is flushed here.
  // /flush_cache answers plain text, not {"success"}: its status says it all.
  absl::Status flushed =
      last.flush_sent && last.label_taken
          ? absl::OkStatus()
          : http_.PostExpectStatus("/flush_cache", nlohmann::json::object(), timeouts_.control);
  if (first.ok()) first = flushed;
  absl::Status resumed = ResumeGeneration();
  return first.ok() ? resumed : first;
}

EngineHealth SglangAdapter::Health() {
  EngineHealth health;
  auto info = http_.GetJson("/get_server_info", timeouts_.probe);
  if (!info.ok()) {
    health.error = std::string(info.status().message());
    return health;
  }
  health.healthy = true;
  // Shown to operators as they came: bounded and printable like every peer's text.
  auto text = [&](const char* key) {
    const nlohmann::json& v = (*info)[key];
    return v.is_string() ? SanitizePeerText(v.get<std::string>(), kMaxVersionBytes) : "";
  };
  health.engine_version = text("version");
  health.weight_version = text("weight_version");
  // Which payload the engine gets, so `wsyncctl engines` names it; a server wsyncd would refuse
  // is healthy but not updatable, and the reason stands beside it.
  if (path_ != nullptr) path_->AddHealth(*info, &health);
  // Sessions are what the last Probe found (every formation probes them).
  if (sessions() && health.variant != "unsupported") {
    absl::StrAppend(&health.variant, ", sessions");
  }
  return health;
}

absl::Status SglangAdapter::ValidateBucket(const BucketManifest& manifest) const {
  if (path_ == nullptr) return absl::InternalError("no data path was picked");
  return path_->ValidateBucket(manifest);
}

absl::Status SglangAdapter::ValidateTensorLayout(const BucketManifest& manifest) const {
  // The flattened receiver reads the tensors back to back in `names` order; per tensor, each
  // broadcast has its own offset.
  if (format_ == BucketFormat::kFlattened) return ValidateFlattenedLayout(manifest);
  for (const TensorEntry& t : manifest.tensors) {
    if (t.dtype == DType::kInt16) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name,
                       "' is int16, which torch's NCCL backend cannot broadcast; use the "
                       "flattened_bucket format"));
    }
  }
  return absl::OkStatus();
}

}  // namespace wsync
