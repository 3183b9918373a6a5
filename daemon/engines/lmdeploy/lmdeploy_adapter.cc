#include "daemon/engines/lmdeploy/lmdeploy_adapter.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"
#include "daemon/engines/lmdeploy/lmdeploy_broadcast_binding.h"
#include "daemon/engines/lmdeploy/lmdeploy_ipc_binding.h"
#include "daemon/engines/openapi_routes.h"

namespace wsync {
namespace {

constexpr char kOpenApiPath[] = "/openapi.json";
// How much of an engine's answer the debug log keeps.
constexpr size_t kLoggedBodyBytes = 300;

// The routes an update cannot do without.
const std::vector<OpenApiRoute>& RequiredRoutes() {
  static const auto* routes = new std::vector<OpenApiRoute>{
      {"post", kLmdeployIpcBucketPath}, {"post", "/sleep"}, {"post", "/wakeup"}};
  return *routes;
}

void LogAnswer(const std::string& url, absl::string_view path, const HttpReply& reply) {
  WSYNC_LOG(Debug, url, path, " answered HTTP ", reply.status, ": ",
            SanitizePeerText(reply.body, kLoggedBodyBytes));
}

}  // namespace

LmdeployAdapter::LmdeployAdapter(EngineEndpoint endpoint, AdapterTimeouts timeouts,
                                 LmdeployOptions options, absl::string_view data_path)
    : endpoint_(std::move(endpoint)),
      timeouts_(timeouts),
      format_(options.load_format()),
      http_(endpoint_.url),
      broadcast_(std::make_unique<LmdeployBroadcastBinding>(*this)),
      ipc_(std::make_unique<LmdeployIpcBinding>(*this)) {
  if (!data_path.empty()) (void)UseDataPath(data_path);
}

LmdeployAdapter::~LmdeployAdapter() = default;

AdapterCapabilities LmdeployAdapter::Capabilities() const {
  AdapterCapabilities caps;
  // On both paths the flattened bucket is one tensor of one dtype: LMDeploy casts an entry of
  // another dtype instead of viewing its bytes (IPC), and FlattenedTensorBucket refuses mixed
  // dtypes (NCCL); per tensor, each has its own dtype.
  caps.bucket_rules.one_dtype = format_ == BucketFormat::kFlattened;
  return caps;
}

DataPathBinding* LmdeployAdapter::Binding(absl::string_view data_path) {
  if (data_path == kBroadcastDataPath) return broadcast_.get();
  if (data_path == kCudaIpcDataPath) return ipc_.get();
  return nullptr;
}

absl::Status LmdeployAdapter::UseDataPath(absl::string_view data_path) {
  WSYNC_RETURN_IF_ERROR(EngineAdapter::UseDataPath(data_path));
  path_ = dynamic_cast<LmdeployPath*>(used_binding());
  return absl::OkStatus();
}

absl::StatusOr<bool> LmdeployAdapter::CheckOpenApi(const HttpReply& reply, const std::string& url,
                                                   RouteAsker* asker) {
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
  const std::optional<OpenApiRoutes> routes = OpenApiRoutes::FromReply(reply);
  if (!routes.has_value()) {
    LogAnswer(url, kOpenApiPath, reply);
    return absl::FailedPreconditionError(absl::StrCat(
        where, " with something that is not an OpenAPI document (no \"openapi\" and \"paths\")",
        kNoDocs));
  }
  // Named in wsyncd's own words: the document's route names are the engine's text, which an
  // error never carries (whatever answers at the URL may not be an engine at all).
  // A route the document leaves out may still be served (a proxy in front may publish a document
  // of its own): asked before it counts as absent.
  const auto has = [&](const OpenApiRoute& route) -> absl::StatusOr<bool> {
    if (asker == nullptr) return routes->Has(route);
    return asker->Has(*routes, route);
  };
  std::vector<std::string> missing;
  for (const OpenApiRoute& route : RequiredRoutes()) {
    WSYNC_ASSIGN_OR_RETURN(const bool found, has(route));
    if (!found) missing.push_back(absl::StrCat("POST ", route.path));
  }
  if (!missing.empty()) {
    LogAnswer(url, kOpenApiPath, reply);
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", url, "'s OpenAPI document lists ", routes->size(), " route(s) but not ",
        absl::StrJoin(missing, ", "),
        asker == nullptr ? "" : ", nor does the server serve them (asked with OPTIONS)",
        ": not an LMDeploy server of the PyTorch backend with the weight-update and sleep API"));
  }
  return has(OpenApiRoute{"post", "/init_weights_update_group"});
}

absl::Status LmdeployAdapter::Probe() {
  WSYNC_ASSIGN_OR_RETURN(HttpReply reply, http_.Get(kOpenApiPath, timeouts_.probe));
  RouteAsker asker(http_, timeouts_.probe);
  WSYNC_ASSIGN_OR_RETURN(const bool update_group, CheckOpenApi(reply, endpoint_.url, &asker));
  // Its document lists LMDeploy's routes: its refusals' reasons reach callers from now on.
  http_.EngineIdentified();
  // The routes first: Health reads them once probed_ is set.
  const bool changed = has_weights_update_group_.exchange(update_group) != update_group;
  if (!probed_.exchange(true) || changed) {
    WSYNC_LOG(Info, "engine ", endpoint_.url, ": LMDeploy ", update_group ? "with" : "without",
              " the NCCL weight-update routes (/init_weights_update_group, PR #4638)");
  }
  if (path_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine ", endpoint_.url, ": no data path was picked for it"));
  }
  return path_->CheckRoutes(update_group);
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
  health.engine_version = probed_version();
  if (path_ != nullptr) path_->AddHealth(has_weights_update_group_.load(), &health);
  return health;
}

absl::Status LmdeployAdapter::ValidateBucket(const BucketManifest& manifest) const {
  if (path_ == nullptr) return absl::InternalError("no data path was picked");
  return path_->ValidateBucket(manifest);
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

absl::Status LmdeployAdapter::CheckBucketReply(const HttpReply& reply) const {
  if (path_ == nullptr) return absl::InternalError("no data path was picked");
  return path_->CheckBucketReply(reply);
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
  if (!finished) {
    if (path_ == nullptr) return absl::InternalError("no data path was picked");
    WSYNC_RETURN_IF_ERROR(path_->FinishOnly());
  }
  return http_.PostExpectStatus("/wakeup?tags=kv_cache", nlohmann::json::object(),
                                timeouts_.control);
}

}  // namespace wsync
