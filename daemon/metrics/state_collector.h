#ifndef WSYNC_DAEMON_METRICS_STATE_COLLECTOR_H_
#define WSYNC_DAEMON_METRICS_STATE_COLLECTOR_H_

#include <mutex>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/daemon_core.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace wsync {

// What the daemon holds now, read from the core at each scrape:
//
//   wsync_up{mode}                                      1 (the mode: cuda or host)
//   wsync_draining                                      1 while draining
//   wsync_sessions                                      trainer sessions open
//   wsync_updates_running                               updates begun and not ended
//   wsync_group_state{group,state}                      1 for the group's state, 0 for the others
//   wsync_group_world_size{group}                       ranks in the group's formation
//   wsync_engine_healthy{group,engine,kind}             1 if the engine answered its health probe
//   wsync_engine_needs_full_version{group,engine}       1 while it waits, paused, for a full
//   version wsync_engine_error_info{group,engine,error}         1, for an engine whose last probe
//   failed wsync_slots{device,state}                           slots per state (free, filling,
//   queued,
//                                                       sending)
//   wsync_device_memory_held_bytes{device}              GPU (host: shared) memory the slots hold
//   wsync_store_connections                             TCPStore connections open
//   wsync_nccl_library_info{library,version}            1 per NCCL library loaded
//
// Engine health costs an HTTP request per engine, so it is probed at most once per
// `engine_probe_interval` however often the daemon is scraped.
class StateCollector final : public prometheus::Collectable {
 public:
  explicit StateCollector(DaemonCore* core,
                          absl::Duration engine_probe_interval = absl::Seconds(10))
      : core_(core), engine_probe_interval_(engine_probe_interval) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::vector<EngineRow> Engines() const;

  DaemonCore* const core_;
  const absl::Duration engine_probe_interval_;
  mutable std::mutex mu_;
  mutable std::vector<EngineRow> engines_;
  mutable absl::Time engines_probed_ = absl::InfinitePast();
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_METRICS_STATE_COLLECTOR_H_
