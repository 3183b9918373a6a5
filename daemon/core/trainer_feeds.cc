#include "daemon/core/trainer_feeds.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/core/transport_kind.h"

namespace wsync {

std::string FeedName(const TrainerFeed& feed) {
  if (feed.gpu_uuid.empty()) return absl::StrCat("device ", feed.device);
  return absl::StrCat("GPU ", feed.gpu_uuid, " (device ", feed.device, ")");
}

absl::StatusOr<std::vector<std::vector<TrainerFeed>>> RankFeedsOf(const GroupSpec& spec,
                                                                  const Platform& platform) {
  std::vector<std::vector<TrainerFeed>> ranks;
  for (const EngineSpec& engine : spec.engines) {
    std::vector<TrainerFeed>& engine_ranks = ranks.emplace_back();
    for (size_t rank = 0; rank < engine.gpus.size(); ++rank) {
      absl::StatusOr<int> device = FindDeviceByUuid(platform, engine.gpus[rank]);
      if (!device.ok()) {
        return absl::Status(device.status().code(),
                            absl::StrCat("group '", spec.name, "': engine ", engine.url,
                                         " TP rank ", rank, ": ", device.status().message()));
      }
      engine_ranks.push_back(TrainerFeed{*device, NormalizeGpuUuid(engine.gpus[rank])});
    }
  }
  return ranks;
}

absl::StatusOr<std::vector<TrainerFeed>> FeedsOf(const GroupSpec& spec, const Platform* platform) {
  if (spec.engine_options != nullptr && !spec.engine_options->stream_devices().empty()) {
    std::vector<TrainerFeed> feeds;
    for (int device : spec.engine_options->stream_devices()) feeds.push_back({device, ""});
    return feeds;
  }
  WSYNC_ASSIGN_OR_RETURN(const TransportKind* transport, TransportOf(spec));
  if (!transport->engines_read_in_place()) return std::vector<TrainerFeed>{{spec.device, ""}};
  if (platform == nullptr) {
    return absl::InternalError(
        absl::StrCat("a ", transport->name(), " group needs the platform's GPUs"));
  }
  WSYNC_ASSIGN_OR_RETURN(auto ranks, RankFeedsOf(spec, *platform));
  std::vector<TrainerFeed> feeds;
  for (const std::vector<TrainerFeed>& engine_ranks : ranks) {
    for (const TrainerFeed& rank : engine_ranks) {
      const bool known = std::any_of(feeds.begin(), feeds.end(),
                                     [&](const TrainerFeed& f) { return f.device == rank.device; });
      if (!known) feeds.push_back(rank);
    }
  }
  return feeds;
}

bool FeedsAreStreams(const GroupSpec& spec) {
  return spec.engine_options != nullptr && !spec.engine_options->stream_devices().empty();
}

}  // namespace wsync
