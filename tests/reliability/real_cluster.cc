#include "tests/reliability/real_cluster.h"

#include <httplib.h>
#include <signal.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checksum.h"

namespace wsync {

RealCluster::RealCluster(ClusterOptions options) : options_(std::move(options)) {
  std::filesystem::create_directories(options_.dir);
  socket_ = options_.dir + "/wsyncd.sock";
}

RealCluster::~RealCluster() {
  admin_.reset();
  // wsyncd first, so that it does not see its engines die.
  if (daemon_ && daemon_->running()) {
    daemon_->Signal(SIGTERM);
    if (daemon_->Wait(absl::Seconds(20)) < 0) daemon_->Signal(SIGKILL);
  }
  daemon_.reset();
  for (auto& e : engines_) e.reset();
}

absl::Status RealCluster::StartEngine(int i) {
  if (ports_[i] == 0) ports_[i] = FreePort();
  engines_[i].reset();  // a process still there is killed first
  engines_[i] = std::make_unique<ChildProcess>(
      SglangEngineArgv(ports_[i], engine_ranks(i)),
      absl::StrCat(options_.dir, "/engine", i, "-", engine_starts_++, ".log"));
  if (!WaitForHttp(ports_[i], absl::Seconds(20))) {
    return absl::UnavailableError(
        absl::StrCat("engine ", i, " did not start: ", engines_[i]->Log()));
  }
  return absl::OkStatus();
}

void RealCluster::StopEngine(int i, int sig) {
  if (!engines_[i]) return;
  engines_[i]->Signal(sig);
  engines_[i]->Wait(absl::Seconds(10));
}

std::string RealCluster::engine_url(int i) const {
  return absl::StrCat("http://127.0.0.1:", ports_[i]);
}

absl::StatusOr<int> RealCluster::SetKnobs(int i, const nlohmann::json& knobs) {
  httplib::Client http("127.0.0.1", ports_[i]);
  auto res = http.Post("/sim/knobs", knobs.dump(), "application/json");
  if (!res || res->status != 200) return absl::UnavailableError("cannot set the engine's knobs");
  return nlohmann::json::parse(res->body).value("updates_received", -1);
}

absl::Status RealCluster::Start() {
  for (int i = 0; i < kEngines; ++i) {
    if (absl::Status s = StartEngine(i); !s.ok()) return s;
  }
  if (absl::Status s = StartDaemon(); !s.ok()) return s;
  return CreateGroup();
}

absl::Status RealCluster::RestartDaemon(int sig) {
  admin_.reset();
  daemon_->Signal(sig);
  if (daemon_->Wait(absl::Seconds(20)) < 0) return absl::DeadlineExceededError("wsyncd stays up");
  // A killed wsyncd leaves its socket; the next one refuses a live one only.
  std::filesystem::remove(socket_);
  if (absl::Status s = StartDaemon(); !s.ok()) return s;
  return CreateGroup();
}

absl::Status RealCluster::StartDaemon() {
  std::vector<std::string> argv = {options_.wsyncd_bin,
                                   "--mode",
                                   "host",
                                   "--socket",
                                   socket_,
                                   "--slot-bytes",
                                   "1MiB",
                                   "--bucket-timeout",
                                   std::to_string(options_.bucket_timeout_s),
                                   "--control-timeout",
                                   std::to_string(options_.control_timeout_s),
                                   "--advertise-address",
                                   "127.0.0.1"};
  argv.insert(argv.end(), options_.extra_flags.begin(), options_.extra_flags.end());
  // One malloc arena: glibc adds an arena (two anonymous mappings) whenever threads contend
  // and fewer than 8 per core exist, which happens at no fixed round under load and reads as a
  // leak of mappings in the fault matrix. No cache of thread stacks either: glibc keeps the
  // stack and guard page of an exited thread (two mappings) for the next one, so a moment when
  // more short-lived threads overlapped (more often under load) leaves mappings that look leaked.
  // With both, the count moves only with what wsyncd holds.
  daemon_ = std::make_unique<ChildProcess>(
      argv,
      daemon_starts_++ == 0 ? options_.dir + "/wsyncd.log"
                            : absl::StrCat(options_.dir, "/wsyncd-", daemon_starts_, ".log"),
      std::vector<std::string>{"MALLOC_ARENA_MAX=1",
                               "GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0",
                               "XDG_STATE_HOME=" + state_home()});
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!std::filesystem::exists(socket_)) {
    if (!daemon_->running() || absl::Now() > deadline) {
      return absl::UnavailableError(absl::StrCat("wsyncd did not start: ", daemon_->Log()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  auto admin = Connect();
  if (!admin.ok()) return admin.status();
  admin_ = std::move(*admin);
  return absl::OkStatus();
}

absl::Status RealCluster::CreateGroup() {
  v1::CreateGroupRequest req;
  v1::GroupSpec* spec = req.mutable_spec();
  spec->set_name("policy");
  spec->set_kind(v1::ENGINE_KIND_SGLANG);
  for (int i = 0; i < kEngines; ++i) {
    auto* e = spec->add_engines();
    e->set_url(engine_url(i));
    e->set_ranks(engine_ranks(i));
  }
  grpc::ClientContext ctx;
  v1::GroupInfo info;
  grpc::Status s = admin_->admin()->CreateGroup(&ctx, req, &info);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("create group: ", s.error_message()));
  return absl::OkStatus();
}

bool RealCluster::DaemonUp() {
  if (!daemon_ || !daemon_->running() || !admin_) return false;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::DaemonStatus status;
  return admin_->admin()->GetStatus(&ctx, v1::GetStatusRequest(), &status).ok();
}

absl::StatusOr<std::unique_ptr<Client>> RealCluster::Connect() {
  return Client::Connect("unix:" + socket_);
}

absl::StatusOr<v1::GroupInfo> RealCluster::Group() {
  v1::GetGroupRequest req;
  req.set_name("policy");
  v1::GroupInfo info;
  grpc::ClientContext ctx;
  grpc::Status s = admin_->admin()->GetGroup(&ctx, req, &info);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  return info;
}

absl::StatusOr<std::vector<v1::UpdateRecord>> RealCluster::Updates() {
  v1::ListUpdatesRequest req;
  req.set_limit(1000);
  v1::ListUpdatesResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = admin_->admin()->ListUpdates(&ctx, req, &resp);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  return std::vector<v1::UpdateRecord>(resp.updates().begin(), resp.updates().end());
}

absl::StatusOr<nlohmann::json> RealCluster::EngineState(int i) {
  httplib::Client http("127.0.0.1", ports_[i]);
  http.set_read_timeout(30, 0);
  auto res = http.Get("/sim/checksums");
  if (!res || res->status != 200) {
    return absl::UnavailableError(absl::StrCat("engine ", i, ": no /sim/checksums"));
  }
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  if (!j.is_object()) {
    return absl::DataLossError(absl::StrCat("engine ", i, ": /sim/checksums is not JSON"));
  }
  return j;
}

absl::StatusOr<bool> RealCluster::EnginePaused(int i) {
  auto state = EngineState(i);
  if (!state.ok()) return state.status();
  return state->value("paused", false);
}

absl::Status RealCluster::EnginesHeldBack() {
  auto group = Group();
  if (!group.ok()) return group.status();
  for (int i = 0; i < kEngines; ++i) {
    auto paused = EnginePaused(i);
    if (!paused.ok()) return paused.status();
    if (!*paused) {
      return absl::DataLossError(
          absl::StrCat("engine ", i,
                       " was resumed after an update that did not commit, though it got part "
                       "of it"));
    }
    bool flagged = false;
    for (const v1::EngineInfo& e : group->engines()) {
      if (e.url() == engine_url(i)) flagged = e.needs_full_version();
    }
    if (!flagged) {
      return absl::DataLossError(
          absl::StrCat("wsyncd does not say that engine ", i, " waits for a full version"));
    }
  }
  return absl::OkStatus();
}

absl::Status RealCluster::EnginesHold(const std::vector<OwnedTensor>& model,
                                      const std::string& version) {
  std::map<std::string, std::string> expected;
  for (const OwnedTensor& t : model) {
    expected[t.name] = Crc32Hex(Crc32(t.data.data(), t.data.size()));
  }
  for (int i = 0; i < kEngines; ++i) {
    auto state = EngineState(i);
    if (!state.ok()) return state.status();
    const nlohmann::json& j = *state;
    if (j.value("weight_version", "") != version) {
      return absl::DataLossError(absl::StrCat("engine ", i, " reports version ",
                                              j.value("weight_version", "?"), ", not ", version));
    }
    if (j.value("paused", false)) {
      return absl::FailedPreconditionError(
          absl::StrCat("engine ", i, " holds ", version, " but is still paused"));
    }
    if (static_cast<int>(j["ranks"].size()) != engine_ranks(i)) {
      return absl::DataLossError(absl::StrCat("engine ", i, ": ", j["ranks"].size(), " ranks"));
    }
    for (const auto& [rank, tensors] : j["ranks"].items()) {
      for (const auto& [name, crc] : expected) {
        if (tensors.value(name, "") != crc) {
          return absl::DataLossError(absl::StrCat("engine ", i, " rank ", rank, " tensor ", name,
                                                  " is not the trainer's (", version, ")"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RealCluster::PushAndVerify(Client& client, const std::string& version,
                                        const std::vector<OwnedTensor>& model) {
  auto pushed = client.Push("policy", version, Refs(model));
  if (!pushed.ok()) return pushed.status();
  return EnginesHold(model, version);
}

}  // namespace wsync
