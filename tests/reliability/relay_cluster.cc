#include "tests/reliability/relay_cluster.h"

#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "tests/engines/sglang/sglang_engine_process.h"

namespace wsync {
namespace {

// As RealCluster's wsyncd: one malloc arena and no cache of thread stacks, so that the fault
// matrix's counts of mappings move only with what wsyncd holds.
std::vector<std::string> DaemonEnvironment(const std::string& state_home) {
  return {"MALLOC_ARENA_MAX=1", "GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0",
          "XDG_STATE_HOME=" + state_home};
}

absl::Status WaitForSocket(const std::string& path, ChildProcess& process) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!std::filesystem::exists(path)) {
    if (!process.running() || absl::Now() > deadline) {
      return absl::UnavailableError(absl::StrCat("wsyncd did not start: ", process.Log()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

void Stop(std::unique_ptr<ChildProcess>& p, int sig) {
  if (p && p->running()) {
    p->Signal(sig);
    if (p->Wait(absl::Seconds(20)) < 0) {
      p->Signal(SIGKILL);
      p->Wait(absl::Seconds(5));
    }
  }
}

bool SameBytes(const nlohmann::json& tensors, const std::vector<OwnedTensor>& model) {
  for (const OwnedTensor& t : model) {
    if (tensors.value(t.name, "") != Crc32Hex(Crc32(t.data.data(), t.data.size()))) return false;
  }
  return true;
}

}  // namespace

RelayCluster::RelayCluster(RelayClusterOptions options) : options_(std::move(options)) {
  std::filesystem::create_directories(options_.dir);
  engine_ports_.assign(options_.downstreams, 0);
  engines_.resize(options_.downstreams);
  downstreams_.resize(options_.downstreams);
}

RelayCluster::~RelayCluster() {
  // Daemons first, so that none sees its engine die.
  for (auto& d : downstreams_) Stop(d, SIGTERM);
  Stop(upstream_, SIGTERM);
  for (auto& e : engines_) e.reset();
}

absl::Status RelayCluster::Start() {
  auto tls = MakeTlsFiles(options_.dir);
  if (!tls.ok()) return tls.status();
  tls_ = *tls;
  std::ofstream(Path("relay.token")) << "relay-secret-" << ::getpid() << "\n";
  upstream_port_ = FreePort();
  if (absl::Status s = StartUpstream(); !s.ok()) return s;
  for (int i = 0; i < options_.downstreams; ++i) {
    engine_ports_[i] = FreePort();
    engines_[i] =
        std::make_unique<ChildProcess>(SglangEngineArgv(engine_ports_[i], 1, options_.engine_flags),
                                       Path(absl::StrCat("engine-", Node(i), ".log")));
    if (!WaitForHttp(engine_ports_[i], absl::Seconds(20))) {
      return absl::UnavailableError(
          absl::StrCat("engine of ", Node(i), " did not start: ", engines_[i]->Log()));
    }
    if (absl::Status s = StartDownstream(i); !s.ok()) return s;
  }
  for (int i = 0; i < options_.downstreams; ++i) {
    if (absl::Status s = WaitSubscribed(i); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status RelayCluster::StartUpstream() {
  nlohmann::json group = {{"name", "policy"}, {"kind", "wsyncd"}, {"transport", "relay"}};
  for (int i = 0; i < options_.downstreams; ++i) {
    group["engines"].push_back({{"url", "wsyncd://" + Node(i)}});
  }
  if (options_.quorum > 0) group["quorum"] = options_.quorum;
  std::ofstream(Path("up.json")) << nlohmann::json{{"groups", {group}}}.dump();
  const std::string socket = Path("up.sock");
  std::filesystem::remove(socket);  // a killed wsyncd leaves it
  upstream_ = std::make_unique<ChildProcess>(
      std::vector<std::string>{options_.wsyncd_bin,
                               "--mode",
                               "host",
                               "--config",
                               Path("up.json"),
                               "--socket",
                               socket,
                               "--listen",
                               absl::StrCat("127.0.0.1:", upstream_port_),
                               "--tls-cert",
                               tls_.cert,
                               "--tls-key",
                               tls_.key,
                               "--token-file",
                               tls_.token,
                               "--admin-token-file",
                               tls_.admin_token,
                               "--relay-token-file",
                               Path("relay.token") + "=policy",
                               "--slot-bytes",
                               "1MiB",
                               "--bind-address",
                               "127.0.0.1",
                               "--advertise-address",
                               "127.0.0.1",
                               "--bucket-timeout",
                               std::to_string(options_.bucket_timeout_s)},
      Path(absl::StrCat("up-", starts_++, ".log")), DaemonEnvironment(Path("state-up")));
  return WaitForSocket(socket, *upstream_);
}

void RelayCluster::KillUpstream(int sig) {
  upstream_->Signal(sig);
  upstream_->Wait(absl::Seconds(20));
}

absl::Status RelayCluster::StartDownstream(int i) {
  const std::string node = Node(i);
  nlohmann::json group = {
      {"name", "policy"},
      {"kind", "sglang"},
      {"transport", "broadcast"},
      {"engines", {{{"url", absl::StrCat("http://127.0.0.1:", engine_ports_[i])}}}}};
  std::ofstream(Path(node + ".json")) << nlohmann::json{{"groups", {group}}}.dump();
  const std::string socket = Path(node + ".sock");
  std::filesystem::remove(socket);
  const std::string feed = absl::StrJoin(
      {absl::StrCat("upstream=127.0.0.1:", upstream_port_), std::string("group=policy"),
       "node=" + node, "token_file=" + Path("relay.token"), "ca_file=" + tls_.cert,
       std::string("server_name=localhost")},
      ",");
  downstreams_[i].reset();  // a process still there is killed first
  downstreams_[i] = std::make_unique<ChildProcess>(
      std::vector<std::string>{options_.wsyncd_bin, "--mode", "host", "--config",
                               Path(node + ".json"), "--socket", socket, "--slot-bytes", "1MiB",
                               "--slots", "2", "--bind-address", "127.0.0.1", "--advertise-address",
                               "127.0.0.1", "--bucket-timeout",
                               std::to_string(options_.bucket_timeout_s), "--relay-feed", feed},
      Path(absl::StrCat(node, "-", starts_++, ".log")), DaemonEnvironment(Path("state-" + node)));
  return WaitForSocket(socket, *downstreams_[i]);
}

void RelayCluster::KillDownstream(int i, int sig) {
  downstreams_[i]->Signal(sig);
  if (sig == SIGKILL || sig == SIGTERM) downstreams_[i]->Wait(absl::Seconds(20));
}

bool RelayCluster::UpstreamUp() {
  if (!upstream_ || !upstream_->running()) return false;
  return UpstreamRelay().ok();
}

bool RelayCluster::DownstreamUp(int i) {
  return downstreams_[i] && downstreams_[i]->running() && DownstreamGroupState(i).ok();
}

std::string RelayCluster::DownstreamLog(int i) const {
  return downstreams_[i] ? downstreams_[i]->Log() : "";
}

absl::StatusOr<v1::RelayStatus> RelayCluster::UpstreamRelay() {
  auto admin = Client::Connect("unix:" + Path("up.sock"));
  if (!admin.ok()) return admin.status();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::RelayStatus status;
  const grpc::Status s = (*admin)->admin()->GetRelay(&ctx, v1::GetRelayRequest(), &status);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  return status;
}

std::string RelayCluster::SubscriberId(int i) {
  auto relay = UpstreamRelay();
  if (!relay.ok()) return "";
  for (const v1::RelaySubscriberInfo& s : relay->subscribers()) {
    if (s.node() == Node(i)) return s.id();
  }
  return "";
}

absl::Status RelayCluster::WaitSubscribed(int i, const std::string& not_id,
                                          absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const std::string id = SubscriberId(i);
    if (!id.empty() && id != not_id) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(Node(i), " never subscribed: ", DownstreamLog(i)));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::StatusOr<v1::GroupState> RelayCluster::DownstreamGroupState(int i) {
  auto admin = Client::Connect("unix:" + Path(Node(i) + ".sock"));
  if (!admin.ok()) return admin.status();
  v1::GetGroupRequest req;
  req.set_name("policy");
  v1::GroupInfo info;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  const grpc::Status s = (*admin)->admin()->GetGroup(&ctx, req, &info);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  return info.state();
}

absl::StatusOr<std::unique_ptr<Client>> RelayCluster::Connect() {
  return Client::Connect("unix:" + Path("up.sock"));
}

absl::StatusOr<nlohmann::json> RelayCluster::EngineState(int i) {
  httplib::Client http("127.0.0.1", engine_ports_[i]);
  http.set_read_timeout(30, 0);
  auto res = http.Get("/sim/checksums");
  if (!res || res->status != 200) {
    return absl::UnavailableError(absl::StrCat("engine of ", Node(i), ": no /sim/checksums"));
  }
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  if (!j.is_object()) return absl::DataLossError("/sim/checksums is not JSON");
  return j;
}

absl::StatusOr<int> RelayCluster::EngineUpdates(int i) {
  auto state = EngineState(i);
  if (!state.ok()) return state.status();
  return state->value("updates_received", -1);
}

absl::Status RelayCluster::EngineHolds(int i, const std::vector<OwnedTensor>& model,
                                       const std::string& version) {
  auto state = EngineState(i);
  if (!state.ok()) return state.status();
  const nlohmann::json& j = *state;
  if (j.value("weight_version", "") != version) {
    return absl::DataLossError(absl::StrCat("the engine of ", Node(i), " reports version ",
                                            j.value("weight_version", "?"), ", not ", version));
  }
  if (j.value("paused", false)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the engine of ", Node(i), " holds ", version, " but is still paused"));
  }
  for (const auto& [rank, tensors] : j["ranks"].items()) {
    if (!SameBytes(tensors, model)) {
      return absl::DataLossError(absl::StrCat("the engine of ", Node(i), " rank ", rank,
                                              " does not hold ", version, " byte for byte"));
    }
  }
  return absl::OkStatus();
}

absl::Status RelayCluster::EngineServesNoMix(int i,
                                             const std::vector<std::vector<OwnedTensor>>& models) {
  auto state = EngineState(i);
  if (!state.ok()) return state.status();
  if (state->value("paused", false)) return absl::OkStatus();
  for (const auto& [rank, tensors] : (*state)["ranks"].items()) {
    bool whole = false;
    for (const std::vector<OwnedTensor>& model : models) whole = whole || SameBytes(tensors, model);
    if (!whole) {
      return absl::DataLossError(absl::StrCat("the engine of ", Node(i), " rank ", rank,
                                              " serves a mix of versions (not paused)"));
    }
  }
  return absl::OkStatus();
}

absl::Status RelayCluster::PushUntilAllCommit(Client& client, const std::string& version,
                                              const std::vector<OwnedTensor>& model,
                                              absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last;
  for (;;) {
    auto pushed = client.Push("policy", version, Refs(model));
    bool all = pushed.ok();
    if (pushed.ok()) {
      for (const EngineResultView& e : pushed->engines) {
        if (!e.status.ok()) {
          all = false;
          last = absl::StrCat(e.engine, ": ", e.status.ToString());
        }
      }
    } else {
      last = pushed.status().ToString();
    }
    if (all) break;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("not every member committed ", version, ": ", last));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  for (int i = 0; i < options_.downstreams; ++i) {
    if (absl::Status s = EngineHolds(i, model, version); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace wsync
