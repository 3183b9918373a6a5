#include "daemon/metrics/state_collector.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/rendezvous/tcp_store_server.h"

namespace wsync {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// A label value as the exposition format may carry it: cut, since an engine's error can be long.
std::string LabelValue(const std::string& value) {
  constexpr size_t kMax = 256;
  return value.size() <= kMax ? value : absl::StrCat(value.substr(0, kMax), "...");
}

class Families {
 public:
  // A family with no series yet still says it exists (its HELP and TYPE).
  void Declare(const std::string& name, const std::string& help) {
    if (index_.count(name) != 0) return;
    index_[name] = families_.size();
    prometheus::MetricFamily family;
    family.name = name;
    family.help = help;
    family.type = prometheus::MetricType::Gauge;
    families_.push_back(std::move(family));
  }
  // One series of a family Declare named.
  void Add(const std::string& name, const Labels& labels, double value) {
    prometheus::ClientMetric metric;
    for (const auto& [k, v] : labels) metric.label.push_back({k, LabelValue(v)});
    metric.gauge.value = value;
    families_[index_.at(name)].metric.push_back(std::move(metric));
  }
  // A family of one series.
  void Gauge(const std::string& name, const std::string& help, const Labels& labels, double value) {
    Declare(name, help);
    Add(name, labels, value);
  }
  std::vector<prometheus::MetricFamily> Take() { return std::move(families_); }

 private:
  std::vector<prometheus::MetricFamily> families_;
  std::map<std::string, size_t> index_;
};

}  // namespace

StateCollector::StateCollector(DaemonCore* core, Options options)
    : core_(core),
      options_(options),
      groups_([core] { return core->ListGroups(); }, options.engine_probe_interval),
      engines_([core] { return core->ListEngines(); }, options.engine_probe_interval) {}

void StateCollector::Start() {
  groups_.Start();
  engines_.Start();
}

void StateCollector::Stop() {
  groups_.Stop();
  engines_.Stop();
}

std::vector<prometheus::MetricFamily> StateCollector::Collect() const {
  Families out;
  const DaemonStatusView status = core_->Status();
  out.Gauge("wsync_up", "1 while wsyncd serves, labelled with its mode (cuda or host)",
            {{"mode", status.mode}}, 1);
  out.Gauge("wsync_draining", "1 while wsyncd refuses new sessions and updates", {},
            status.draining ? 1 : 0);
  out.Gauge("wsync_sessions", "Trainer sessions open", {}, static_cast<double>(status.sessions));
  out.Gauge("wsync_updates_running", "Weight updates begun and not yet ended", {},
            core_->running_updates());

  out.Declare("wsync_group_state", "1 for the group's state, 0 for the others");
  out.Declare("wsync_group_world_size", "Ranks in the group's formation, wsyncd's included");
  const std::vector<GroupSnapshot> groups = groups_.Fresh(options_.groups_wait).value;
  for (const GroupSnapshot& g : groups) {
    for (GroupState state : {GroupState::kForming, GroupState::kReady, GroupState::kUpdating,
                             GroupState::kBroken, GroupState::kDestroyed}) {
      out.Add("wsync_group_state",
              {{"group", g.spec.name}, {"state", std::string(GroupStateName(state))}},
              g.state == state ? 1 : 0);
    }
    out.Add("wsync_group_world_size", {{"group", g.spec.name}}, g.world_size);
  }

  out.Declare("wsync_engine_healthy", "1 if the engine answered its last health probe");
  out.Declare("wsync_engine_needs_full_version",
              "1 while the engine waits, paused, for a complete update");
  out.Declare("wsync_engine_error_info", "1 for each engine whose last probe failed, with why");
  // (group, engine URL) -> the engine's last probe.
  std::map<std::pair<std::string, std::string>, EngineRow> probed;
  for (EngineRow& row : engines_.Latest().value) {
    probed[{row.group, row.endpoint.url}] = std::move(row);
  }
  bool unprobed = false;
  for (const GroupSnapshot& g : groups) {
    for (const EngineEndpoint& e : g.endpoints) {
      const Labels labels = {{"group", g.spec.name}, {"engine", e.url}};
      // Read with the group, so it is as fresh as the group's state.
      out.Add("wsync_engine_needs_full_version", labels,
              g.needs_full_version.count(e.url) == 0 ? 0 : 1);
      auto row = probed.find({g.spec.name, e.url});
      if (row == probed.end()) {
        unprobed = true;
        continue;
      }
      const EngineHealth& health = row->second.health;
      out.Add("wsync_engine_healthy",
              {{"group", g.spec.name}, {"engine", e.url}, {"kind", g.spec.kind}},
              health.healthy ? 1 : 0);
      if (!health.error.empty()) {
        out.Add("wsync_engine_error_info",
                {{"group", g.spec.name}, {"engine", e.url}, {"error", health.error}}, 1);
      }
    }
  }
  // Engines never probed (a group made since the last probe) are probed now, in the background:
  // a later scrape reports them.
  if (unprobed) engines_.Wake();

  std::map<std::pair<int, std::string>, int> slots;
  for (const SlotRow& row : core_->ListBuffers()) {
    ++slots[{row.device, std::string(SlotStateName(row.state))}];
  }
  out.Declare("wsync_slots", "Slots per device and state");
  for (const auto& [key, count] : slots) {
    out.Add("wsync_slots", {{"device", std::to_string(key.first)}, {"state", key.second}}, count);
  }
  out.Declare("wsync_device_memory_held_bytes",
              "Device memory (host mode: shared memory) the slots hold");
  for (const DeviceMemoryRow& d : core_->ListDeviceMemory()) {
    out.Add("wsync_device_memory_held_bytes", {{"device", std::to_string(d.device)}},
            static_cast<double>(d.bytes_held));
  }
  out.Gauge("wsync_store_connections", "TCPStore connections open on wsyncd's stores", {},
            TcpStoreServer::OpenConnectionsInProcess());
  out.Declare("wsync_nccl_library_info", "1 for each NCCL library loaded, with its version");
  for (const auto& [library, version] : core_->platform().LoadedNcclLibraries()) {
    out.Add("wsync_nccl_library_info", {{"library", library}, {"version", version}}, 1);
  }
  // Read under the lock, so that SetResidents(nullptr) returns only once no scrape reads them.
  std::lock_guard<std::mutex> lock(residents_mu_);
  if (residents_) {
    out.Declare("wsync_resident_bytes",
                "Memory a relay feed's resident version holds (staged buckets included)");
    out.Declare("wsync_resident_cap_bytes", "The cap on a relay feed's resident version");
    out.Declare("wsync_resident_kept", "1 while a relay feed keeps a whole version, 0 if none");
    for (const ResidentRow& r : residents_()) {
      const Labels labels = {{"group", r.group}, {"medium", r.medium}};
      out.Add("wsync_resident_bytes", labels, static_cast<double>(r.bytes));
      out.Add("wsync_resident_cap_bytes", labels, static_cast<double>(r.cap_bytes));
      out.Add("wsync_resident_kept", labels, r.kept ? 1 : 0);
    }
  }
  return out.Take();
}

void StateCollector::SetResidents(ResidentSource source) {
  std::lock_guard<std::mutex> lock(residents_mu_);
  residents_ = std::move(source);
}

}  // namespace wsync
