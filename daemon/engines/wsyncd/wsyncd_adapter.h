#ifndef WSYNC_DAEMON_ENGINES_WSYNCD_WSYNCD_ADAPTER_H_
#define WSYNC_DAEMON_ENGINES_WSYNCD_WSYNCD_ADAPTER_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/core/engine_adapter.h"
#include "daemon/engines/wsyncd/wsyncd_options.h"
#include "daemon/relay/relay_channel.h"
#include "daemon/transport/relay/relay_binding.h"

namespace wsync {

// One member of a relay group: a downstream wsyncd (URL wsyncd://<node>), reached through its
// subscription to the group (docs/RELAY.md). It has no engine of its own to pause: the
// downstream pauses its local groups' engines when its update begins, and commits them when told
// to. Its bucket rules are those its subscription declared for its local groups, asked again at
// every update.
class WsyncdAdapter final : public EngineAdapter {
 public:
  WsyncdAdapter(const EngineEndpoint& endpoint, const AdapterTimeouts& timeouts,
                const WsyncdOptions& options, std::string group);
  ~WsyncdAdapter() override;

  const EngineEndpoint& endpoint() const override { return endpoint_; }
  void SetRankOffset(uint32_t rank_offset) override { endpoint_.rank_offset = rank_offset; }
  AdapterCapabilities Capabilities() const override;
  absl::Status Probe() override;
  EngineHealth Health() override;
  absl::Status ValidateBucket(const BucketManifest& manifest) const override;
  // A downstream pauses its own engines when its update begins. Outside an update these do
  // nothing; during one (the group leaves the member out, or ends the update without it) both
  // abort the downstream's update: its engines that took part of it stay paused until a whole
  // version, the others go on serving the version they hold whole. AbandonUpdate after the
  // member committed (the group's commit failed elsewhere) tells it to hold: its engines pause
  // until a whole version and its resident copy of the version is dropped.
  absl::Status PauseGeneration() override { return AbortOpenUpdate("left out of the update"); }
  absl::Status ResumeGeneration() override { return AbortOpenUpdate("the update ended"); }
  absl::Status BeginUpdate(const UpdateInfo& update) override;
  void AbandonUpdate() override;
  absl::Status FinishUpdate(const UpdateInfo& update) override;
  std::vector<std::string> TakeCommitWarnings() override;
  std::vector<std::string> TakeRelayedOutcomes() override;
  absl::Status CheckBucketReply(const HttpReply& reply) const override { return absl::OkStatus(); }
  std::string probed_version() const override;
  std::string ManualResumeHint() const override {
    return "wsyncctl resume on the downstream node's wsyncd";
  }
  DataPathBinding* Binding(absl::string_view data_path) override;

  // The most engine outcomes a downstream's commit reply is read for.
  static constexpr int kMaxRelayedOutcomes = 1024;

  // The node this member stands for (the URL's host part).
  const std::string& node() const { return node_; }
  // Its subscription stream now (see RelayBinding::Channel).
  absl::StatusOr<std::shared_ptr<RelayChannel>> Channel() const;

 private:
  class MemberBinding;
  // Sends abort when an update is open at the downstream; OK otherwise.
  absl::Status AbortOpenUpdate(absl::string_view why);

  EngineEndpoint endpoint_;
  const AdapterTimeouts timeouts_;
  const WsyncdOptions options_;
  const std::string group_;
  const std::string node_;
  std::unique_ptr<MemberBinding> binding_;
  mutable std::mutex mu_;
  std::vector<std::string> commit_warnings_;  // guarded by mu_
  std::vector<std::string> relayed_;          // guarded by mu_
  bool update_open_ = false;                  // guarded by mu_: begun, not committed or aborted
  // Guarded by mu_: its last update committed at the downstream (until the next begins), so an
  // AbandonUpdate after it (the group's commit failed) holds its engines.
  bool committed_ = false;
};

}  // namespace wsync

#endif  // WSYNC_DAEMON_ENGINES_WSYNCD_WSYNCD_ADAPTER_H_
