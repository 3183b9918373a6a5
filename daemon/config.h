#ifndef WSYNC_DAEMON_CONFIG_H_
#define WSYNC_DAEMON_CONFIG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/network_allow_list.h"
#include "daemon/core/daemon_core.h"
#include "daemon/relay/relay_feeder.h"
#include "daemon/service/group_spec_json.h"
#include "daemon/service/server.h"
#include "nlohmann/json.hpp"

namespace wsync {

struct DaemonConfig {
  DaemonOptions daemon;
  ServerOptions server;
  std::string log_level = "info";
  std::vector<GroupSpec> groups;
  // "engine_networks" as given; absent: the default EngineNetworksFor makes.
  std::optional<std::vector<std::string>> engine_networks;
  // Where group records are kept (StateDir). Absent: ChooseDefaultStateDir's; empty: nowhere.
  std::optional<std::string> state_dir;
  // Where Prometheus scrapes /metrics ("HOST:PORT"); empty: no metrics listener.
  std::string metrics_listen;
  // "text" or "json" (ParseLogFormat).
  std::string log_format = "text";
  // The same log line again within this many seconds is held back and counted; 0: never.
  double log_repeat_seconds = 10;
  // The upstream relay groups that feed local groups here (this node is a relay's downstream).
  std::vector<RelayFeedOptions> relay_feeds;
  // Whether the relay feeds keep the last version they received whole, where, and the cap.
  ResidentOptions resident;
};

// Parses "512MiB", "1GiB", "4096", "2G" into bytes.
absl::StatusOr<uint64_t> ParseByteSize(const std::string& text);

// The config's "groups" entries are read by GroupSpecFromJson (daemon/service/group_spec_json.h),
// which a trainer's DeclareGroup shares.

// Reads a JSON config file. Its keys mirror the flags (socket, listen, max_streams_per_connection,
// max_streams_per_caller, stream_idle_timeout_s, handshake_timeout_s, mode, slots, slot_bytes,
// bucket_timeout_s, lease_s, control_timeout_s, advertise_address, bind_address, log_level,
// engine_networks, state_dir) plus "groups": [GroupSpecFromJson entries]. Fields absent from the
// file keep the values already in `config`. Unknown keys are refused: a misspelt key would leave a
// setting (engine_networks, say) at its default without a word.
absl::Status LoadConfigFile(const std::string& path, DaemonConfig* config);
// LoadConfigFile on text already read; `source` names it in errors (the file's path).
absl::Status LoadConfigText(absl::string_view text, const std::string& source,
                            DaemonConfig* config);

// The hosts engines may be at: `config.engine_networks` when given (hosts, addresses, networks),
// else loopback and the hosts of the config's own groups.
absl::StatusOr<NetworkAllowList> EngineNetworksFor(const DaemonConfig& config);

}  // namespace wsync

#endif  // WSYNC_DAEMON_CONFIG_H_
