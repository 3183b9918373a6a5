#ifndef WSYNC_DAEMON_METRICS_UPDATE_METRICS_H_
#define WSYNC_DAEMON_METRICS_UPDATE_METRICS_H_

#include <memory>
#include <string>

#include "daemon/core/update_observer.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace wsync {

// The counters and latency histograms of updates and buckets, kept as they end (the core calls
// it as its UpdateObserver). Names and units follow Prometheus' conventions: seconds and bytes,
// `_total` on counters, one `wsync_` prefix.
//
//   wsync_updates_total{group,outcome}            counter: committed, failed, aborted
//   wsync_update_duration_seconds{group,outcome}  histogram: from the first bucket's turn to
//                                                 the end
//   wsync_update_bytes_total{group}               counter: bytes the engines took
//   wsync_buckets_total{group}                    counter
//   wsync_bucket_phase_seconds{group,phase}       histogram, one series per phase the daemon
//                                                 measures: verify (slot checksum or pull copy),
//                                                 idle (rank 0 had nothing queued), wire (rank 0's
//                                                 broadcast), answer (from reusable sources to the
//                                                 engines' last answer), total
//   wsync_engine_warnings_total{group,engine}     counter: what an engine's commit let pass (a
//                                                 version label not set)
//   wsync_wire_bytes_total{group,kind}            counter, relay groups sending deltas: bytes
//                                                 sent to members (sent) and their dense bytes
//                                                 (dense), for every update that ended
//   wsync_delta_elements_total{group,kind}        counter, the same: elements compared with the
//                                                 base (compared) and changed (changed)
class UpdateMetrics final : public UpdateObserver {
 public:
  explicit UpdateMetrics(prometheus::Registry& registry);

  void BucketDone(const std::string& group, uint64_t bytes, const BucketTiming& timing) override;
  void UpdateDone(const std::string& group, const std::string& version, const std::string& state,
                  const UpdateOutcome& outcome) override;

 private:
  prometheus::Family<prometheus::Counter>& updates_;
  prometheus::Family<prometheus::Histogram>& update_seconds_;
  prometheus::Family<prometheus::Counter>& update_bytes_;
  prometheus::Family<prometheus::Counter>& buckets_;
  prometheus::Family<prometheus::Histogram>& bucket_phase_seconds_;
  prometheus::Family<prometheus::Counter>& engine_warnings_;
  prometheus::Family<prometheus::Counter>& wire_bytes_;
  prometheus::Family<prometheus::Counter>& delta_elements_;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_METRICS_UPDATE_METRICS_H_
