#include "daemon/metrics/update_metrics.h"

namespace wsync {
namespace {

// An update takes from well under a second (a small model, colocated) to minutes (hundreds of
// GiB over a slow network).
const prometheus::Histogram::BucketBoundaries& UpdateBounds() {
  static const auto* bounds = new prometheus::Histogram::BucketBoundaries{
      0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 600};
  return *bounds;
}

// A bucket's phases run from microseconds (an idle gap) to seconds (a 1 GiB bucket's load).
const prometheus::Histogram::BucketBoundaries& PhaseBounds() {
  static const auto* bounds = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *bounds;
}

}  // namespace

UpdateMetrics::UpdateMetrics(prometheus::Registry& registry)
    : updates_(prometheus::BuildCounter()
                   .Name("wsync_updates_total")
                   .Help("Weight updates that ended, by group and outcome")
                   .Register(registry)),
      update_seconds_(prometheus::BuildHistogram()
                          .Name("wsync_update_duration_seconds")
                          .Help("How long weight updates took, from start to commit or failure")
                          .Register(registry)),
      update_bytes_(prometheus::BuildCounter()
                        .Name("wsync_update_bytes_total")
                        .Help("Bytes of buckets every engine of the group took")
                        .Register(registry)),
      buckets_(prometheus::BuildCounter()
                   .Name("wsync_buckets_total")
                   .Help("Buckets every engine of the group took")
                   .Register(registry)),
      bucket_phase_seconds_(
          prometheus::BuildHistogram()
              .Name("wsync_bucket_phase_seconds")
              .Help("Where each bucket's time went: verify, idle, wire, answer, and its total")
              .Register(registry)),
      engine_warnings_(prometheus::BuildCounter()
                           .Name("wsync_engine_warnings_total")
                           .Help("What engines' commits let pass rather than fail the update "
                                 "for, such as a version label not set")
                           .Register(registry)),
      wire_bytes_(prometheus::BuildCounter()
                      .Name("wsync_wire_bytes_total")
                      .Help("Relay groups sending deltas: bytes of updates' buckets sent to "
                            "members (kind=\"sent\") and what they would have been dense "
                            "(kind=\"dense\")")
                      .Register(registry)),
      delta_elements_(prometheus::BuildCounter()
                          .Name("wsync_delta_elements_total")
                          .Help("Relay groups sending deltas: elements compared with the base "
                                "(kind=\"compared\") and those that changed (kind=\"changed\")")
                          .Register(registry)) {}

void UpdateMetrics::BucketDone(const std::string& group, uint64_t bytes,
                               const BucketTiming& timing) {
  buckets_.Add({{"group", group}}).Increment();
  update_bytes_.Add({{"group", group}}).Increment(static_cast<double>(bytes));
  const std::pair<const char*, double> phases[] = {{"verify", timing.verify},
                                                   {"idle", timing.idle},
                                                   {"wire", timing.wire},
                                                   {"answer", timing.answer},
                                                   {"total", timing.total}};
  for (const auto& [phase, seconds] : phases) {
    bucket_phase_seconds_.Add({{"group", group}, {"phase", phase}}, PhaseBounds()).Observe(seconds);
  }
}

void UpdateMetrics::UpdateDone(const std::string& group, const std::string& version,
                               const std::string& state, const UpdateOutcome& outcome) {
  updates_.Add({{"group", group}, {"outcome", state}}).Increment();
  update_seconds_.Add({{"group", group}, {"outcome", state}}, UpdateBounds())
      .Observe(outcome.seconds);
  for (const EngineOutcome& e : outcome.engines) {
    if (e.warnings.empty()) continue;
    engine_warnings_.Add({{"group", group}, {"engine", e.engine}})
        .Increment(static_cast<double>(e.warnings.size()));
  }
  if (const std::optional<WireVolume>& v = outcome.wire_volume) {
    wire_bytes_.Add({{"group", group}, {"kind", "sent"}})
        .Increment(static_cast<double>(v->sent_bytes));
    wire_bytes_.Add({{"group", group}, {"kind", "dense"}})
        .Increment(static_cast<double>(v->dense_bytes));
    delta_elements_.Add({{"group", group}, {"kind", "compared"}})
        .Increment(static_cast<double>(v->elements_compared));
    delta_elements_.Add({{"group", group}, {"kind", "changed"}})
        .Increment(static_cast<double>(v->elements_changed));
  }
}

}  // namespace wsync
