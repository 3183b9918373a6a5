// wsyncd's command line over its config file (daemon/daemon_flags.h): a flag given wins over the
// file, the file over the default, and what the flags hold in other units arrives converted.

#include "daemon/daemon_flags.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

int Parse(std::vector<std::string> args, DaemonCommandLine* out) {
  args.insert(args.begin(), "wsyncd");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseDaemonCommandLine(static_cast<int>(argv.size()), argv.data(), out);
}

std::string ConfigFile(const std::string& name, const std::string& json) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << json;
  return path;
}

TEST(DaemonFlags, AFlagGivenWinsOverTheFileAndTheFileOverTheDefault) {
  const std::string path = ConfigFile("wsyncd-flags.json", R"({
    "socket": "/tmp/from-file.sock", "mode": "host", "slot_bytes": "1GiB",
    "bucket_timeout_s": 7, "control_timeout_s": 4, "lease_s": 9, "log_level": "warning",
    "engine_networks": ["10.0.0.0/8"], "advertise_address": "10.1.2.3"})");
  DaemonCommandLine line;
  ASSERT_EQ(Parse({"--config", path, "--socket", "/tmp/from-flag.sock", "--lease", "11",
                   "--ipc-socket-dir", "/tmp", "--engine-networks", "127.0.0.1,192.168.0.0/16"},
                  &line),
            -1);
  const DaemonConfig& c = line.config;
  EXPECT_EQ(c.server.unix_socket, "/tmp/from-flag.sock");
  EXPECT_EQ(c.daemon.lease, absl::Seconds(11));
  EXPECT_EQ(c.daemon.mode, "host");
  EXPECT_EQ(c.daemon.slot_bytes, uint64_t{1} << 30);
  EXPECT_EQ(c.daemon.bucket_timeout, absl::Seconds(7));
  EXPECT_EQ(c.daemon.group.timeouts.control, absl::Seconds(4));
  EXPECT_LE(c.daemon.group.timeouts.probe, absl::Seconds(4)) << "a probe is a control call";
  EXPECT_EQ(c.log_level, "warning");
  ASSERT_TRUE(c.engine_networks.has_value());
  EXPECT_EQ(*c.engine_networks, (std::vector<std::string>{"127.0.0.1", "192.168.0.0/16"}));
  EXPECT_EQ(c.daemon.group.transport.advertise_address, "10.1.2.3");
  EXPECT_EQ(c.daemon.group.transport.bind_address, "10.1.2.3") << "defaults to the advertised";
}

TEST(DaemonFlags, WithoutAFileTheDefaultsHold) {
  DaemonCommandLine line;
  ASSERT_EQ(Parse({"--socket", "/tmp/x.sock", "--ipc-socket-dir", "/tmp"}, &line), -1);
  const DaemonConfig& c = line.config;
  EXPECT_EQ(c.daemon.mode, "cuda");
  EXPECT_EQ(c.daemon.slot_bytes, uint64_t{512} << 20);
  EXPECT_EQ(c.daemon.bucket_timeout, absl::Seconds(120));
  EXPECT_EQ(c.daemon.lease, absl::Seconds(60));
  EXPECT_EQ(c.daemon.group.timeouts.control, absl::Seconds(30));
  EXPECT_FALSE(c.engine_networks.has_value());
  EXPECT_FALSE(c.state_dir.has_value());
  EXPECT_EQ(line.nccl_lib, "libnccl.so.2");
}

TEST(DaemonFlags, RelayTokensComeFromTheFileOrTheFlagsEachWithItsGroups) {
  const std::string path = ConfigFile("wsyncd-relay.json", R"({
    "relay_tokens": [{"token_file": "/etc/wsync/relay-a.token", "groups": ["policy", "ref"]}]})");
  DaemonCommandLine from_file;
  ASSERT_EQ(
      Parse({"--config", path, "--socket", "/tmp/x.sock", "--ipc-socket-dir", "/tmp"}, &from_file),
      -1);
  ASSERT_EQ(from_file.config.server.relay_token_files.size(), 1u);
  EXPECT_EQ(from_file.config.server.relay_token_files[0].file, "/etc/wsync/relay-a.token");
  EXPECT_EQ(from_file.config.server.relay_token_files[0].groups,
            (std::vector<std::string>{"policy", "ref"}));
  // Flags, repeated, replace the file's list.
  DaemonCommandLine from_flags;
  ASSERT_EQ(Parse({"--config", path, "--socket", "/tmp/x.sock", "--ipc-socket-dir", "/tmp",
                   "--relay-token-file", "/run/b.token=policy", "--relay-token-file",
                   "/run/c.token=ref,critic@rollout-1,rollout-2"},
                  &from_flags),
            -1);
  const auto& tokens = from_flags.config.server.relay_token_files;
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0].file, "/run/b.token");
  EXPECT_EQ(tokens[0].groups, (std::vector<std::string>{"policy"}));
  EXPECT_EQ(tokens[1].file, "/run/c.token");
  EXPECT_EQ(tokens[1].groups, (std::vector<std::string>{"ref", "critic"}));
  // Bound to nodes after @; without, any node the groups name.
  EXPECT_TRUE(tokens[0].nodes.empty());
  EXPECT_EQ(tokens[1].nodes, (std::vector<std::string>{"rollout-1", "rollout-2"}));
  // And in the file, as "nodes".
  const std::string bound = ConfigFile("wsyncd-relay-bound.json", R"({
    "relay_tokens": [{"token_file": "/t", "groups": ["policy"], "nodes": ["rollout-3"]}]})");
  DaemonCommandLine from_bound;
  ASSERT_EQ(Parse({"--config", bound, "--socket", "/tmp/x.sock", "--ipc-socket-dir", "/tmp"},
                  &from_bound),
            -1);
  EXPECT_EQ(from_bound.config.server.relay_token_files.at(0).nodes,
            (std::vector<std::string>{"rollout-3"}));
  // A token without groups is refused: it would admit to nothing, or be read as everything; so
  // is an @ that names no node.
  for (const char* bad : {"/run/b.token", "/run/b.token=", "=policy", "/run/b.token=policy@"}) {
    DaemonCommandLine line;
    EXPECT_EQ(
        Parse({"--socket", "/tmp/x.sock", "--ipc-socket-dir", "/tmp", "--relay-token-file", bad},
              &line),
        1)
        << bad;
  }
  const std::string no_groups =
      ConfigFile("wsyncd-relay-bad.json", R"({"relay_tokens": [{"token_file": "/x"}]})");
  DaemonCommandLine line;
  EXPECT_EQ(
      Parse({"--config", no_groups, "--socket", "/tmp/x.sock", "--ipc-socket-dir", "/tmp"}, &line),
      1);
}

TEST(DaemonFlags, TheStateDirFlagCanSayNone) {
  DaemonCommandLine line;
  ASSERT_EQ(
      Parse({"--socket", "/tmp/x.sock", "--ipc-socket-dir", "/tmp", "--state-dir", ""}, &line), -1);
  ASSERT_TRUE(line.config.state_dir.has_value());
  EXPECT_EQ(*line.config.state_dir, "");
}

TEST(DaemonFlags, HelpExitsZeroAndMistakesExitNonZero) {
  DaemonCommandLine help;
  EXPECT_EQ(Parse({"--help"}, &help), 0);
  DaemonCommandLine bad;
  EXPECT_GT(Parse({"--mode", "tpu"}, &bad), 0);
  DaemonCommandLine nowhere;
  EXPECT_EQ(Parse({"--socket", "", "--ipc-socket-dir", "/tmp"}, &nowhere), 1);
  DaemonCommandLine no_dir;
  EXPECT_EQ(Parse({"--socket", "/tmp/x.sock", "--ipc-socket-dir", "/nonexistent-dir"}, &no_dir), 1);
  DaemonCommandLine no_file;
  EXPECT_EQ(Parse({"--config", "/nonexistent.json"}, &no_file), 1);
}

}  // namespace
}  // namespace wsync
