#ifndef WSYNC_DAEMON_CORE_TRAINER_FEEDS_H_
#define WSYNC_DAEMON_CORE_TRAINER_FEEDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gpu_seam.h"
#include "daemon/core/group_spec.h"

namespace wsync {

// One trainer rank's share of a group's updates: the device whose slots it fills and, on the IPC
// path, that device's GPU. A broadcast group is fed from its one device; an IPC group from every
// GPU its engines' TP ranks are on, each by the trainer rank on that GPU (engines map memory of
// their own GPU only), in the order the ranks first name them.
struct TrainerFeed {
  int device = 0;
  std::string gpu_uuid;  // empty off the IPC path
};
std::string FeedName(const TrainerFeed& feed);
// The feed each engine TP rank reads from, per engine in rank order: the device on the rank's GPU
// (named by UUID in the spec). NOT_FOUND naming the engine and rank whose GPU wsyncd has no device
// for. For an IPC spec only.
absl::StatusOr<std::vector<std::vector<TrainerFeed>>> RankFeedsOf(const GroupSpec& spec,
                                                                  const Platform& platform);
// The feeds of a group: its stream devices where its engine options name them (each feed's
// buckets its own: FeedsAreStreams), else the transport's (a colocated group's engine GPUs, or the
// group's device). NOT_FOUND naming the engine and rank whose GPU wsyncd has no device for.
absl::StatusOr<std::vector<TrainerFeed>> FeedsOf(const GroupSpec& spec, const Platform* platform);
// Whether each feed of the group sends buckets of its own (streams) rather than its share of
// every bucket (the TP ranks of a colocated group, each sending the same bucket plan).
bool FeedsAreStreams(const GroupSpec& spec);

}  // namespace wsync

#endif  // WSYNC_DAEMON_CORE_TRAINER_FEEDS_H_
