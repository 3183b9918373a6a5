#include "daemon/engines/lmdeploy/lmdeploy_adapter.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"
#include "daemon/engines/lmdeploy/lmdeploy_ipc_payload.h"
#include "daemon/engines/lmdeploy/lmdeploy_nccl_payload.h"
#include "daemon/engines/torch_group_body.h"

namespace wsync {
namespace {

constexpr char kBucketPath[] = "/update_weights";
constexpr char kDistributedPath[] = "/update_weights_from_distributed";
constexpr char kOpenApiPath[] = "/openapi.json";
// How much of an engine's answer the debug log keeps.
constexpr size_t kLoggedBodyBytes = 300;

// The routes an update cannot do without, as (method, path) in the OpenAPI document.
constexpr std::pair<const char*, const char*> kRequiredRoutes[] = {
    {"post", kBucketPath}, {"post", "/sleep"}, {"post", "/wakeup"}};

void LogAnswer(const std::string& url, absl::string_view path, const HttpReply& reply) {
  WSYNC_LOG(Debug, url, path, " answered HTTP ", reply.status, ": ",
            SanitizePeerText(reply.body, kLoggedBodyBytes));
}

bool HasRoute(const nlohmann::json& paths, const char* method, const char* path) {
  auto it = paths.find(path);
  return it != paths.end() && it->is_object() && it->contains(method);
}

}  // namespace

LmdeployAdapter::LmdeployAdapter(EngineEndpoint endpoint, AdapterTimeouts timeouts,
                                 LmdeployOptions options, TransportKind transport)
    : endpoint_(std::move(endpoint)),
      timeouts_(timeouts),
      format_(options.load_format()),
      transport_(transport),
      http_(endpoint_.url) {}

AdapterCapabilities LmdeployAdapter::Capabilities() const {
  AdapterCapabilities caps;
  caps.rendezvous = {RendezvousMode::kTorchStore};
  caps.data_paths = {DataPath::kCudaIpc, DataPath::kBroadcast};
  // On both paths the flattened bucket is one tensor of one dtype: LMDeploy casts an entry of
  // another dtype instead of viewing its bytes (IPC), and FlattenedTensorBucket refuses mixed
  // dtypes (NCCL); per tensor, each has its own dtype.
  caps.bucket_rules.one_dtype = format_ == BucketFormat::kFlattened;
  return caps;
}

absl::StatusOr<bool> LmdeployAdapter::CheckOpenApi(const HttpReply& reply, const std::string& url) {
  const std::string where = absl::StrCat(url, kOpenApiPath, " answered HTTP ", reply.status);
  // wsyncd knows an LMDeploy server's routes only from this document (it has no version route).
  constexpr char kNoDocs[] =
      "; wsyncd reads an LMDeploy server's routes from its OpenAPI document, which a server "
      "started with --disable-fastapi-docs does not serve: restart it without that flag";
  if (reply.status == 404) {
    LogAnswer(url, kOpenApiPath, reply);
    return absl::FailedPreconditionError(absl::StrCat(where, ": no OpenAPI document", kNoDocs));
  }
  if (reply.status != 200) {
    LogAnswer(url, kOpenApiPath, reply);
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": the engine refused the request", kNoDocs));
  }
  const nlohmann::json doc = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("openapi") || !doc.contains("paths") ||
      !doc["paths"].is_object()) {
    LogAnswer(url, kOpenApiPath, reply);
    return absl::FailedPreconditionError(absl::StrCat(
        where, " with something that is not an OpenAPI document (no \"openapi\" and \"paths\")",
        kNoDocs));
  }
  const nlohmann::json& paths = doc["paths"];
  // Named in wsyncd's own words: the document's route names are the engine's text, which an
  // error never carries (whatever answers at the URL may not be an engine at all).
  std::vector<std::string> missing;
  for (const auto& [method, path] : kRequiredRoutes) {
    if (!HasRoute(paths, method, path)) {
      missing.push_back(absl::StrCat(absl::AsciiStrToUpper(method), " ", path));
    }
  }
  if (!missing.empty()) {
    LogAnswer(url, kOpenApiPath, reply);
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", url, "'s OpenAPI document lists ", paths.size(), " route(s) but not ",
        absl::StrJoin(missing, ", "),
        ": not an LMDeploy server of the PyTorch backend with the weight-update and sleep API"));
  }
  return HasRoute(paths, "post", "/init_weights_update_group");
}

absl::Status LmdeployAdapter::Probe() {
  WSYNC_ASSIGN_OR_RETURN(HttpReply reply, http_.Get(kOpenApiPath, timeouts_.probe));
  WSYNC_ASSIGN_OR_RETURN(const bool update_group, CheckOpenApi(reply, endpoint_.url));
  // The routes first: Health reads them once probed_ is set.
  const bool changed = has_weights_update_group_.exchange(update_group) != update_group;
  if (!probed_.exchange(true) || changed) {
    WSYNC_LOG(Info, "engine ", endpoint_.url, ": LMDeploy ", update_group ? "with" : "without",
              " the NCCL weight-update routes (/init_weights_update_group, PR #4638)");
  }
  if (transport_ == TransportKind::kBroadcast && !update_group) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", endpoint_.url,
        " is an LMDeploy server without POST /init_weights_update_group (PR #4638, 2026-06-16), "
        "so it cannot join a broadcast group: upgrade it, or use the ipc transport"));
  }
  return absl::OkStatus();
}

std::string LmdeployAdapter::probed_version() const {
  if (!probed_.load()) return "";
  return has_weights_update_group_.load() ? "routes of PR #4638" : "routes before PR #4638";
}

EngineHealth LmdeployAdapter::Health() {
  EngineHealth health;
  if (absl::Status healthy = http_.GetHealth(timeouts_.probe); !healthy.ok()) {
    health.error = std::string(healthy.message());
    return health;
  }
  auto sleeping = http_.GetJson("/is_sleeping", timeouts_.probe);
  if (!sleeping.ok()) {
    health.error = std::string(sleeping.status().message());
    return health;
  }
  const nlohmann::json& flag = (*sleeping)["is_sleeping"];
  if (!flag.is_boolean()) {
    health.error = absl::StrCat(endpoint_.url,
                                "/is_sleeping answered without a boolean is_sleeping: not an "
                                "LMDeploy server");
    return health;
  }
  health.healthy = true;
  // Between an update's sleep and its last wakeup, or put to sleep by someone else.
  health.sleeping = flag.get<bool>();
  // LMDeploy reports no version: what its routes said at the last Probe stands in for one
  // (every formation probes them; Health does not fetch the whole document each time).
  if (!probed_.load()) {
    health.engine_version = "not probed";
    health.variant = "-";
    return health;
  }
  const bool update_group = has_weights_update_group_.load();
  health.engine_version = probed_version();
  if (transport_ == TransportKind::kBroadcast && !update_group) {
    health.variant = "unsupported";
    health.error = "no POST /init_weights_update_group (PR #4638), which a broadcast group needs";
    return health;
  }
  health.variant = absl::StrCat(transport_ == TransportKind::kBroadcast ? "nccl " : "ipc ",
                                BucketFormatName(format_));
  return health;
}

absl::Status LmdeployAdapter::ValidateBucket(const BucketManifest& manifest) const {
  // The broadcast's receive is one concatenation: back to back, as the pieces say.
  if (transport_ == TransportKind::kBroadcast) return BroadcastPieces(manifest).status();
  if (format_ == BucketFormat::kFlattened) return LmdeployBucketDtype(manifest).status();
  // Per tensor, every view has its own dtype and offset; ValidateManifest keeps them aligned.
  return absl::OkStatus();
}

void LmdeployAdapter::ForgetHeldLocked() const {
  held_update_.clear();
  held_.clear();
}

absl::Status LmdeployAdapter::PauseGeneration() {
  {
    // A sleep drops the worker's cached tensor and event (even one that fails half way).
    std::lock_guard<std::mutex> lock(mu_);
    ForgetHeldLocked();
  }
  return http_.PostExpectStatus("/sleep?level=1", nlohmann::json::object(), timeouts_.control);
}

absl::Status LmdeployAdapter::BeginUpdate(const UpdateInfo& /*update*/) {
  return http_.PostExpectStatus("/wakeup?tags=weights", nlohmann::json::object(),
                                timeouts_.control);
}

void LmdeployAdapter::AbandonUpdate() {
  std::lock_guard<std::mutex> lock(mu_);
  ForgetHeldLocked();
}

absl::Status LmdeployAdapter::ResumeGeneration() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ForgetHeldLocked();
  }
  // No tags: LMDeploy wakes whatever sleeps, so this resumes an engine paused at any step.
  return http_.PostExpectStatus("/wakeup", nlohmann::json::object(), timeouts_.control);
}

absl::StatusOr<EngineRequest> LmdeployAdapter::IpcBucketRequest(
    const BucketManifest& manifest, const std::vector<IpcBucketView>& ranks,
    const BucketContext& context) const {
  if (ranks.size() != endpoint_.ranks) {
    return absl::InternalError(absl::StrCat("engine ", endpoint_.url, " has ", endpoint_.ranks,
                                            " TP rank(s) but the bucket has ", ranks.size(),
                                            " view(s)"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Another update (or one without an id, which cannot be told apart): the engine slept since
  // (PauseGeneration), so its workers hold nothing.
  if (context.update_id.empty() || context.update_id != held_update_) {
    ForgetHeldLocked();
    held_update_ = context.update_id;
  }
  held_.resize(ranks.size());
  std::vector<bool> send(ranks.size(), true);
  std::vector<std::optional<HeldTensor>> after = held_;
  if (format_ == BucketFormat::kFlattened) {
    WSYNC_ASSIGN_OR_RETURN(const DType dtype, LmdeployBucketDtype(manifest));
    for (size_t r = 0; r < ranks.size(); ++r) {
      const HeldTensor needed{ranks[r].memory_handle, ranks[r].allocation_bytes, dtype};
      send[r] = !held_[r].has_value() || !(*held_[r] == needed);
      after[r] = needed;
    }
  }
  auto body = LmdeployIpcBucketBody(manifest, ranks, format_, context.last, send);
  if (!body.ok()) {
    // Nothing goes out, but the update fails; whatever follows cannot rely on the cache.
    ForgetHeldLocked();
    return body.status();
  }
  held_ = std::move(after);
  if (context.last) {
    finished_update_ = context.update_id;
    // `finished` drops the cached tensor and event.
    ForgetHeldLocked();
  }
  return EngineRequest{kBucketPath, body->dump()};
}

absl::Status LmdeployAdapter::NotPytorchBackend(const char* path) const {
  return absl::FailedPreconditionError(absl::StrCat(
      endpoint_.url, path,
      " answered HTTP 501: only LMDeploy's pytorch backend (--backend pytorch, Ray executor) "
      "serves weight-update groups; restart the server so (not retried: a configuration error)"));
}

absl::Status LmdeployAdapter::PostDistributed(const char* path, const nlohmann::json& body) const {
  WSYNC_ASSIGN_OR_RETURN(HttpReply reply, http_.Post(path, body, timeouts_.control));
  if (reply.status == 501) return NotPytorchBackend(path);
  return http_.ExpectSuccess(path, reply).status();
}

absl::Status LmdeployAdapter::InitBroadcastGroup(const Rendezvous& rendezvous) {
  WSYNC_RETURN_IF_ERROR(PostDistributed("/init_weights_update_group",
                                        TorchGroupInitBody(rendezvous, endpoint_.rank_offset)));
  std::lock_guard<std::mutex> lock(mu_);
  group_name_ = rendezvous.group_name;
  return absl::OkStatus();
}

absl::Status LmdeployAdapter::DestroyBroadcastGroup(const std::string& group_name) {
  return PostDistributed("/destroy_weights_update_group", {{"group_name", group_name}});
}

absl::StatusOr<EngineRequest> LmdeployAdapter::BroadcastBucketRequest(
    const BucketManifest& manifest, const std::string& group_name,
    const BucketContext& context) const {
  if (context.last) {
    std::lock_guard<std::mutex> lock(mu_);
    finished_update_ = context.update_id;
  }
  return EngineRequest{
      kDistributedPath,
      LmdeployDistributedBucketBody(manifest, group_name, format_, context.last).dump()};
}

absl::StatusOr<std::vector<BroadcastPiece>> LmdeployAdapter::BroadcastPieces(
    const BucketManifest& manifest) const {
  return LmdeployBroadcastPieces(manifest, format_);
}

absl::Status LmdeployAdapter::CheckBucketReply(const HttpReply& reply) const {
  if (transport_ == TransportKind::kBroadcast) {
    if (reply.status == 501) return NotPytorchBackend(kDistributedPath);
    return http_.ExpectSuccess(kDistributedPath, reply).status();
  }
  absl::Status status = CheckBucketAnswer(reply);
  if (!status.ok()) {
    // A request that failed may have failed before or after the worker cached its tensor.
    std::lock_guard<std::mutex> lock(mu_);
    ForgetHeldLocked();
  }
  return status;
}

absl::Status LmdeployAdapter::CheckBucketAnswer(const HttpReply& reply) const {
  if (reply.status == 200) {
    // FastAPI's JSONResponse(content=None): the body is exactly null.
    if (absl::StripAsciiWhitespace(reply.body) == "null") return absl::OkStatus();
    http_.LogBody(kBucketPath, reply);
    return absl::InternalError(absl::StrCat(endpoint_.url, kBucketPath,
                                            " answered HTTP 200 with something other than null: "
                                            "not LMDeploy's answer to a weight update"));
  }
  if (reply.status == 400 && absl::StrContains(absl::AsciiStrToLower(reply.body), "pickle")) {
    // PR #4964: pickled payloads on HTTP /update_weights only with the server's opt-in.
    http_.LogBody(kBucketPath, reply);
    return absl::FailedPreconditionError(absl::StrCat(
        endpoint_.url, kBucketPath,
        " answered HTTP 400, refusing pickled tensors: an LMDeploy server loads CUDA IPC "
        "weight updates only when it runs with LMDEPLOY_ALLOW_PICKLE_UPDATE_PARAMS=1 in its "
        "environment; restart it so (not retried: a configuration error)"));
  }
  if (reply.status > 200 && reply.status < 300) {
    http_.LogBody(kBucketPath, reply);
    return absl::InternalError(absl::StrCat(endpoint_.url, kBucketPath, " answered HTTP ",
                                            reply.status,
                                            ": not LMDeploy's answer to a weight update"));
  }
  // 500 for an exception while loading; the status names it, the body stays in the log.
  return http_.ExpectSuccess(kBucketPath, reply).status();
}

absl::Status LmdeployAdapter::FinishUpdate(const UpdateInfo& update) {
  bool finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished = !update.update_id.empty() && finished_update_ == update.update_id;
  }
  {
    // The finish drops the workers' cached tensor and event.
    std::lock_guard<std::mutex> lock(mu_);
    ForgetHeldLocked();
  }
  if (!finished && transport_ == TransportKind::kBroadcast) {
    std::string group;
    {
      std::lock_guard<std::mutex> lock(mu_);
      group = group_name_;
    }
    // Names empty: nothing is broadcast, and the finished hooks run.
    WSYNC_RETURN_IF_ERROR(
        PostDistributed(kDistributedPath, LmdeployDistributedFinishBody(group, format_)));
  } else if (!finished) {
    WSYNC_ASSIGN_OR_RETURN(nlohmann::json body, LmdeployFinishOnlyBody(endpoint_.ranks, format_));
    WSYNC_ASSIGN_OR_RETURN(HttpReply reply, http_.Post(kBucketPath, body, timeouts_.control));
    WSYNC_RETURN_IF_ERROR(CheckBucketReply(reply));
  }
  return http_.PostExpectStatus("/wakeup?tags=kv_cache", nlohmann::json::object(),
                                timeouts_.control);
}

}  // namespace wsync
