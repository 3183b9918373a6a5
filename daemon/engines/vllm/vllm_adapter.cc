#include "daemon/engines/vllm/vllm_adapter.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "daemon/core/peer_text.h"
#include "daemon/engines/openapi_routes.h"
#include "daemon/engines/vllm/vllm_ipc_binding.h"
#include "daemon/engines/vllm/vllm_ipc_payload.h"
#include "daemon/engines/vllm/vllm_nccl_binding.h"
#include "daemon/engines/weight_checker.h"

namespace wsync {
namespace {

constexpr char kFinishPath[] = "/finish_weight_update";
constexpr char kStartPath[] = "/start_weight_update";
constexpr char kRepush[] = "; the update fails and the trainer must push the whole version again";
constexpr char kInitPath[] = "/init_weight_transfer_engine";

// ABORTED for a 409 to `path`: vLLM took the call as out of order.
absl::Status OutOfOrder(const std::string& url, absl::string_view path, absl::string_view what) {
  return absl::AbortedError(absl::StrCat(url, path, " answered HTTP 409: the engine took ", what,
                                         " as out of order", kRepush));
}

}  // namespace

VllmAdapter::VllmAdapter(EngineEndpoint endpoint, AdapterTimeouts timeouts, VllmOptions options,
                         absl::string_view data_path)
    : endpoint_(std::move(endpoint)),
      timeouts_(timeouts),
      options_(std::move(options)),
      http_(endpoint_.url),
      nccl_(std::make_unique<VllmNcclBinding>(*this)),
      ipc_(std::make_unique<VllmIpcBinding>(*this)) {
  if (!data_path.empty()) (void)UseDataPath(data_path);
}

VllmAdapter::~VllmAdapter() = default;

AdapterCapabilities VllmAdapter::Capabilities() const {
  // No bucket rules: see the class comment.
  return AdapterCapabilities{};
}

DataPathBinding* VllmAdapter::Binding(absl::string_view data_path) {
  if (data_path == kBroadcastDataPath) return nccl_.get();
  if (data_path == kCudaIpcDataPath) return ipc_.get();
  return nullptr;
}

absl::Status VllmAdapter::UseDataPath(absl::string_view data_path) {
  WSYNC_RETURN_IF_ERROR(EngineAdapter::UseDataPath(data_path));
  path_ = dynamic_cast<VllmPath*>(used_binding());
  return absl::OkStatus();
}

VllmBackend VllmAdapter::backend() const {
  return path_ == nullptr ? VllmBackend::kIpc : path_->backend();
}

const char* VllmAdapter::ServerFlags() const {
  return backend() == VllmBackend::kNccl
             ? "start vLLM with VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config "
               "'{\"backend\": \"nccl\"}'"
             : "start vLLM with VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config "
               "'{\"backend\": \"ipc\"}'";
}

std::optional<VllmVariant> VllmAdapter::variant() const {
  std::lock_guard<std::mutex> lock(mu_);
  return variant_;
}

absl::StatusOr<std::pair<VllmVersion, VllmVariant>> VllmAdapter::CheckVersion(
    const nlohmann::json& answer, const std::string& url, const VllmOptions& options,
    VllmBackend backend) {
  auto field = answer.find("version");
  if (field == answer.end() || !field->is_string()) {
    return absl::FailedPreconditionError(
        absl::StrCat(url, "/version answered without a \"version\" string: not a vLLM server"));
  }
  const std::string text = field->get<std::string>();
  auto version = ParseVllmVersion(text);
  if (!version.ok()) {
    // The engine's text is not echoed: a version wsyncd cannot read says nothing useful.
    return absl::FailedPreconditionError(
        absl::StrCat(url, "/version answered a version wsyncd cannot read (", text.size(),
                     " characters, not MAJOR.MINOR.PATCH): not a vLLM server wsyncd knows"));
  }
  std::optional<VllmVersion> forced;
  if (!options.engine_version().empty()) {
    // Checked when the group's options were read.
    auto parsed = ParseEngineVersionOption("vllm", options.engine_version());
    if (parsed.ok()) forced = *parsed;
  }
  const std::string hint = EngineVersionOverrideHint(*version);
  *version = GateVersion(*version, forced ? &*forced : nullptr);
  const bool nccl = backend == VllmBackend::kNccl;
  auto variant = nccl ? VllmNcclVariantFor(*version) : VllmVariantFor(*version);
  if (!variant.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine ", url, ": ", variant.status().message(), hint));
  }
  if (version->prerelease) {
    // A pre-release orders before its release, but a build from before a release that changed
    // the payload may already send the new one, and no route tells them apart: where the two
    // readings differ, refuse rather than guess (the override names the release to serve).
    VllmVersion as_release = *version;
    as_release.prerelease = false;
    auto released = nccl ? VllmNcclVariantFor(as_release) : VllmVariantFor(as_release);
    if (released.ok() && released->name != variant->name) {
      return absl::FailedPreconditionError(absl::StrCat(
          "engine ", url, ": vLLM ", version->Described(), " would be served as older than ",
          version->Release(), ", but ", version->Release(), " changed what wsyncd sends (",
          variant->name, " before it, ", released->name,
          " from it) and no route tells which one this build reads: refused before any byte is "
          "sent",
          hint));
    }
  }
  if (nccl && options.rendezvous() == VllmRendezvous::kUniqueId && !variant->nccl_unique_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", url, ": vLLM ", version->text,
        " reads no nccl_unique_id_b64 (it came with vLLM ", kVllmMinUniqueIdVersion,
        "); create the group with the store rendezvous (--vllm-rendezvous store), or upgrade "
        "the engine",
        hint));
  }
  if (!nccl && options.packed() && !variant->packed_ipc) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", url, ": vLLM ", version->text,
        " reads no packed IPC updates (they came with vLLM 0.22.0); create the group without "
        "packed, or upgrade the engine",
        hint));
  }
  return std::make_pair(*std::move(version), *std::move(variant));
}

absl::Status VllmAdapter::Probe() {
  auto answer = http_.GetJson("/version", timeouts_.probe);
  if (!answer.ok()) {
    if (answer.status().code() == absl::StatusCode::kUnimplemented) {
      return absl::FailedPreconditionError(
          absl::StrCat(answer.status().message(), "; not a vLLM server (vLLM serves /version)"));
    }
    return answer.status();
  }
  if (path_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine ", endpoint_.url, ": no data path was picked for it"));
  }
  WSYNC_ASSIGN_OR_RETURN(auto found,
                         CheckVersion(*answer, endpoint_.url, options_, path_->backend()));
  // A vLLM version it serves: its refusals' reasons reach callers from now on.
  http_.EngineIdentified();
  auto& [version, variant] = found;
  WSYNC_RETURN_IF_ERROR(CheckRoutes(version, variant));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!variant_.has_value() || variant_->name != variant.name || version_text_ != version.text) {
      WSYNC_LOG(Info, "engine ", endpoint_.url, ": vLLM ", version.Described(), ", variant ",
                variant.name);
    }
    variant_ = variant;
    version_text_ = version.text;
  }
  return path_->ProbeServer();
}

absl::Status VllmAdapter::CheckRoutes(const VllmVersion& version,
                                      const VllmVariant& variant) const {
  WSYNC_ASSIGN_OR_RETURN(std::optional<OpenApiRoutes> routes,
                         ReadOpenApiRoutes(http_, endpoint_.url, timeouts_.probe));
  // No document: each route answers for itself when it is called (the init at formation first).
  if (!routes.has_value()) return absl::OkStatus();
  std::vector<OpenApiRoute> needed = {{"get", "/is_sleeping"},
                                      {"post", "/pause"},
                                      {"post", "/resume"},
                                      {"post", kInitPath},
                                      {"post", kVllmBucketPath}};
  if (variant.session_routes) {
    needed.push_back({"post", kStartPath});
    needed.push_back({"post", kFinishPath});
  }
  if (options_.reset_prefix_cache()) needed.push_back({"post", "/reset_prefix_cache"});
  WSYNC_ASSIGN_OR_RETURN(const std::vector<std::string> missing,
                         UnservedRoutes(*routes, needed, http_, timeouts_.probe));
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "engine ", endpoint_.url, " (vLLM ", version.text, "): it serves no ",
      absl::StrJoin(missing, ", no "),
      " (its OpenAPI document does not list them, and asked with OPTIONS the server does not "
      "serve them either), which every update of this group calls: refused "
      "before any byte is sent (vLLM serves its weight-transfer routes only in dev mode: ",
      ServerFlags(), ")"));
}

std::string VllmAdapter::probed_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_text_;
}

absl::StatusOr<WeightChecksums> VllmAdapter::ChecksumWeights() {
  return AskVllmWeightChecker(http_, endpoint_.url, timeouts_.checksum);
}

absl::Status VllmAdapter::PostInit(const nlohmann::json& body) const {
  auto init = http_.PostExpectSuccess(kInitPath, body, timeouts_.control);
  if (init.ok()) return absl::OkStatus();
  if (init.status().code() == absl::StatusCode::kUnimplemented) {
    return absl::FailedPreconditionError(
        absl::StrCat(init.status().message(),
                     "; vLLM serves the weight-transfer routes only in dev mode: ", ServerFlags()));
  }
  return absl::Status(init.status().code(),
                      absl::StrCat(init.status().message(), " (", ServerFlags(), ")"));
}

absl::StatusOr<bool> VllmAdapter::IsSleeping() const {
  WSYNC_ASSIGN_OR_RETURN(nlohmann::json answer, http_.GetJson("/is_sleeping", timeouts_.probe));
  auto flag = answer.find("is_sleeping");
  if (flag == answer.end() || !flag->is_boolean()) {
    return absl::FailedPreconditionError(
        absl::StrCat(endpoint_.url,
                     "/is_sleeping answered without a boolean is_sleeping: not a vLLM server "
                     "with the sleep routes (",
                     ServerFlags(), ")"));
  }
  return flag->get<bool>();
}

EngineHealth VllmAdapter::Health() {
  EngineHealth health;
  if (absl::Status healthy = http_.GetHealth(timeouts_.probe); !healthy.ok()) {
    health.error = std::string(healthy.message());
    return health;
  }
  auto answer = http_.GetJson("/version", timeouts_.probe);
  if (!answer.ok()) {
    health.error = std::string(answer.status().message());
    return health;
  }
  auto found = CheckVersion(*answer, endpoint_.url, options_, backend());
  auto sleeping = IsSleeping();
  if (!sleeping.ok()) {
    health.error = std::string(sleeping.status().message());
    return health;
  }
  health.healthy = true;
  health.sleeping = *sleeping;
  const nlohmann::json& version = (*answer)["version"];
  if (version.is_string()) {
    health.engine_version = SanitizePeerText(version.get<std::string>(), kMaxVersionBytes);
  }
  if (!found.ok()) {
    // Healthy, but not one wsyncd can update: the reason stands beside the version.
    health.variant = "unsupported";
    health.error = std::string(found.status().message());
    return health;
  }
  health.variant = found->second.name;
  return health;
}

absl::Status VllmAdapter::ValidateBucket(const BucketManifest& manifest) const {
  if (options_.packed()) return VllmCheckPackedLayout(manifest);
  // Unpacked, every view has its own dtype and offset; ValidateManifest keeps them aligned.
  return absl::OkStatus();
}

absl::Status VllmAdapter::PauseGeneration() {
  WSYNC_ASSIGN_OR_RETURN(const bool sleeping, IsSleeping());
  if (sleeping && !options_.wake_weights()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine ", endpoint_.url,
        " is asleep (GET /is_sleeping): an update into a sleeping vLLM crashes its engine "
        "(vLLM #57853), so nothing was sent; wake it (POST /wake_up?tags=weights) before pushing, "
        "or create the group with the vLLM option wake_weights (wsyncctl --vllm-wake-weights)"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    asleep_at_pause_ = sleeping;
  }
  const std::string path = absl::StrCat("/pause?mode=", VllmPauseModeName(options_.pause_mode()));
  return http_.PostEmptyExpectSuccess(path, timeouts_.control).status();
}

absl::Status VllmAdapter::BeginUpdate(const UpdateInfo& /*update*/) {
  bool wake;
  std::optional<VllmVariant> variant;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = asleep_at_pause_ && options_.wake_weights();
    variant = variant_;
  }
  if (!variant.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine ", endpoint_.url, " was never probed"));
  }
  if (wake) {
    WSYNC_RETURN_IF_ERROR(
        http_.PostEmptyExpectSuccess("/wake_up?tags=weights", timeouts_.control).status());
    std::lock_guard<std::mutex> lock(mu_);
    woke_weights_ = true;
  }
  if (!variant->session_routes) return absl::OkStatus();
  WSYNC_ASSIGN_OR_RETURN(HttpReply reply, http_.PostEmpty(kStartPath, timeouts_.control));
  if (reply.status == 409) {
    // A session left open (an update that failed before its finish, another client, a wsyncd that
    // died): close it, so the next update starts.
    http_.LogBody(kStartPath, reply);
    {
      std::lock_guard<std::mutex> lock(mu_);
      session_open_ = true;
    }
    FinishBestEffort("a weight update was already open at the start");
    return OutOfOrder(endpoint_.url, kStartPath,
                      "the start (a weight update was already open; wsyncd finished it)");
  }
  if (absl::Status s = http_.ExpectSuccess(kStartPath, reply).status(); !s.ok()) {
    return absl::AbortedError(absl::StrCat(s.message(), kRepush));
  }
  std::lock_guard<std::mutex> lock(mu_);
  session_open_ = true;
  return absl::OkStatus();
}

absl::Status VllmAdapter::CheckBucketReply(const HttpReply& reply) const {
  if (reply.status >= 200 && reply.status < 300) return absl::OkStatus();
  http_.LogBody(kVllmBucketPath, reply);
  if (reply.status == 409) return OutOfOrder(endpoint_.url, kVllmBucketPath, "the bucket");
  if (absl::StrContains(reply.body, "VLLM_ALLOW_INSECURE_SERIALIZATION")) {
    return absl::FailedPreconditionError(absl::StrCat(
        endpoint_.url, kVllmBucketPath, " answered HTTP ", reply.status,
        ", refusing pickled IPC handles: vLLM reads ipc_handles_pickled only when the server runs "
        "with VLLM_ALLOW_INSECURE_SERIALIZATION=1 in its environment; restart it so (not "
        "retried: a configuration error)"));
  }
  return absl::AbortedError(absl::StrCat(endpoint_.url, kVllmBucketPath, " answered HTTP ",
                                         reply.status,
                                         ": the engine failed to load the bucket and may hold "
                                         "part of it",
                                         kRepush));
}

absl::Status VllmAdapter::PostFinish(const UpdateInfo& update, const VllmVariant& variant) {
  absl::StatusOr<HttpReply> reply =
      variant.finish_weight_version
          ? http_.Post(kFinishPath, {{"weight_version", update.version}}, timeouts_.control)
          : http_.PostEmpty(kFinishPath, timeouts_.control);
  {
    // Whatever it answered, the session is no longer ours to close.
    std::lock_guard<std::mutex> lock(mu_);
    session_open_ = false;
  }
  if (!reply.ok()) return reply.status();
  if (reply->status == 409) {
    http_.LogBody(kFinishPath, *reply);
    return OutOfOrder(endpoint_.url, kFinishPath, "the finish");
  }
  if (absl::Status s = http_.ExpectSuccess(kFinishPath, *reply).status(); !s.ok()) {
    return absl::AbortedError(absl::StrCat(s.message(), kRepush));
  }
  return absl::OkStatus();
}

void VllmAdapter::FinishBestEffort(const char* why) {
  std::optional<VllmVariant> variant;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!session_open_) return;
    variant = variant_;
  }
  if (!variant.has_value()) return;
  // No weight_version: the update did not land, and the engine's version must not say it did.
  VllmVariant plain = *variant;
  plain.finish_weight_version = false;
  if (absl::Status s = PostFinish(UpdateInfo{}, plain); !s.ok()) {
    WSYNC_LOG(Warning, "engine ", endpoint_.url, ": closing its weight update (", why,
              ") failed: ", s.message());
  }
}

absl::Status VllmAdapter::FinishUpdate(const UpdateInfo& update) {
  std::optional<VllmVariant> variant;
  bool session_open;
  bool woke;
  {
    std::lock_guard<std::mutex> lock(mu_);
    variant = variant_;
    session_open = session_open_;
    woke = woke_weights_;
  }
  if (variant.has_value() && variant->session_routes) {
    if (!session_open) {
      return absl::AbortedError(
          absl::StrCat("engine ", endpoint_.url, ": no weight update is open to finish", kRepush));
    }
    // A failed finish leaves the engine paused, as a failed commit leaves every engine: weights
    // whose post-processing did not run are not to be served.
    WSYNC_RETURN_IF_ERROR(PostFinish(update, *variant));
  }
  if (options_.reset_prefix_cache()) {
    WSYNC_RETURN_IF_ERROR(
        http_.PostEmptyExpectSuccess("/reset_prefix_cache", timeouts_.control).status());
  }
  if (woke) {
    WSYNC_RETURN_IF_ERROR(
        http_.PostEmptyExpectSuccess("/wake_up?tags=kv_cache", timeouts_.control).status());
    std::lock_guard<std::mutex> lock(mu_);
    woke_weights_ = false;
  }
  return http_.PostEmptyExpectSuccess("/resume", timeouts_.control).status();
}

absl::Status VllmAdapter::ResumeGeneration() {
  FinishBestEffort("the update failed or was aborted");
  bool woke;
  {
    std::lock_guard<std::mutex> lock(mu_);
    woke = woke_weights_;
    woke_weights_ = false;
  }
  if (woke) {
    if (absl::Status s =
            http_.PostEmptyExpectSuccess("/wake_up?tags=kv_cache", timeouts_.control).status();
        !s.ok()) {
      WSYNC_LOG(Warning, "engine ", endpoint_.url, ": waking its KV cache failed: ", s.message());
    }
  }
  return http_.PostEmptyExpectSuccess("/resume", timeouts_.control).status();
}

}  // namespace wsync
