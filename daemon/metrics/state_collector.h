#ifndef WSYNC_DAEMON_METRICS_STATE_COLLECTOR_H_
#define WSYNC_DAEMON_METRICS_STATE_COLLECTOR_H_

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/daemon_core.h"
#include "daemon/metrics/background_sampler.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace wsync {

// What the daemon holds now, read from the core at each scrape:
//
//   wsync_up{mode}                                1 (the mode: cuda or host)
//   wsync_draining                                1 while draining
//   wsync_sessions                                trainer sessions open
//   wsync_updates_running                         updates begun and not ended
//   wsync_group_state{group,state}                1 for the group's state, 0 for the others
//   wsync_group_world_size{group}                 ranks in the group's formation
//   wsync_engine_healthy{group,engine,kind}       1 if the engine answered its last health probe
//   wsync_engine_needs_full_version{group,engine} 1 while it waits, paused, for a full version
//   wsync_engine_error_info{group,engine,error}   1, for an engine whose last probe failed
//   wsync_slots{device,state}                     slots per state (free, filling, queued, sending)
//   wsync_device_memory_held_bytes{device}        GPU (host: shared) memory the slots hold
//   wsync_store_connections                       TCPStore connections open
//   wsync_nccl_library_info{library,version}      1 per NCCL library loaded
//   wsync_resident_bytes{group,medium}            a relay feed's resident version: memory held
//   wsync_resident_cap_bytes{group,medium}        its cap (--resident-bytes)
//   wsync_resident_kept{group,medium}             1 while a whole version is kept, 0 if none
//
// The resident rows come from the relay feeds, which live beside the core (SetResidents).
//
// A scrape never waits on an engine: engine health (an HTTP request per engine) is probed in a
// thread of the collector's own every `engine_probe_interval`, and at once when a scrape finds
// engines that were never probed (a group was made), and each scrape reports the last probe.
// The groups are read in another such thread: a group holds its lock while it forms (probing and
// joining its engines), so a scrape waits at most `groups_wait` for a fresh read of them and
// otherwise reports the last one.
class StateCollector final : public prometheus::Collectable {
 public:
  // One relay feed's resident version, as the metrics show it.
  struct ResidentRow {
    std::string group;   // the local group it feeds
    std::string medium;  // "host" or "gpu"
    uint64_t bytes = 0;  // held now, staged buckets included
    uint64_t cap_bytes = 0;
    bool kept = false;  // a whole version is kept
  };
  using ResidentSource = std::function<std::vector<ResidentRow>()>;
  struct Options {
    absl::Duration engine_probe_interval = absl::Seconds(10);
    absl::Duration groups_wait = absl::Seconds(1);
  };

  explicit StateCollector(DaemonCore* core) : StateCollector(core, Options()) {}
  StateCollector(DaemonCore* core, Options options);
  ~StateCollector() override { Stop(); }

  // Starts the probing threads.
  void Start();
  // Ends them, after a probe in flight (bounded by the engines' probe timeout); the core may go
  // after this.
  void Stop();

  std::vector<prometheus::MetricFamily> Collect() const override;
  // Where the resident versions are read at each scrape (none until set); returns once no scrape
  // reads the previous source.
  void SetResidents(ResidentSource source);

 private:
  DaemonCore* const core_;
  const Options options_;
  mutable BackgroundSampler<std::vector<GroupSnapshot>> groups_;
  mutable BackgroundSampler<std::vector<EngineRow>> engines_;
  mutable std::mutex residents_mu_;
  ResidentSource residents_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_METRICS_STATE_COLLECTOR_H_
