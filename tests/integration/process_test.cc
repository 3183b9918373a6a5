// Real wsyncd and simulator processes on loopback, driven through the C++ client and wsyncctl.

#include <fcntl.h>
#include <httplib.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "client/cpp/client.h"
#include "common/host/host_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process_harness.h"
#include "tests/service/service_fixture.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/wsync-", ::getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    socket_ = dir_ + "/wsyncd.sock";
  }

  std::unique_ptr<ChildProcess> StartSim(int port, int tp, std::vector<std::string> extra = {}) {
    auto p = std::make_unique<ChildProcess>(SglangEngineArgv(port, tp, extra),
                                            absl::StrCat(dir_, "/sim-", port, ".log"));
    EXPECT_TRUE(WaitForHttp(port, absl::Seconds(20))) << p->Log();
    return p;
  }

  std::unique_ptr<ChildProcess> StartDaemon(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {WSYNCD_BIN,  "--mode",
                                     "host",      "--socket",
                                     socket_,     "--slot-bytes",
                                     "1MiB",      "--bucket-timeout",
                                     "5",         "--control-timeout",
                                     "5",         "--advertise-address",
                                     "127.0.0.1", "--bind-address",
                                     "127.0.0.1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = std::make_unique<ChildProcess>(argv, dir_ + "/wsyncd.log", StateEnv());
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!std::filesystem::exists(socket_) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    return p;
  }

  // Every wsyncd a test starts keeps its default state directory in the test's own folder
  // ($XDG_STATE_HOME/wsync), never the user's, and apart from other tests running beside it.
  std::vector<std::string> StateEnv() const { return {"XDG_STATE_HOME=" + state_home()}; }
  std::string state_home() const { return dir_ + "/xdg-state"; }

  std::pair<int, std::string> Ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {WSYNCCTL_BIN, "--socket", socket_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, dir_ + "/ctl.log");
  }

  // `wsyncctl group policy` once it shows `state`, or as it is after 15 s.
  std::string WaitForGroup(const std::string& state) {
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    std::string group;
    while (absl::Now() < deadline) {
      group = Ctl({"group", "policy"}).second;
      if (group.find(state) != std::string::npos) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return group;
  }

  std::unique_ptr<Client> Connect() {
    auto c = Client::Connect("unix:" + socket_);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static void ExpectEngineHolds(int port, const std::vector<OwnedTensor>& model,
                                const std::string& version, size_t ranks) {
    httplib::Client http("127.0.0.1", port);
    auto res = http.Get("/sim/checksums");
    ASSERT_TRUE(res && res->status == 200);
    nlohmann::json j = nlohmann::json::parse(res->body);
    EXPECT_EQ(j["weight_version"], version);
    ASSERT_EQ(j["ranks"].size(), ranks);
    for (auto& [rank, tensors] : j["ranks"].items()) {
      for (const auto& t : model) {
        EXPECT_EQ(tensors.value(t.name, ""), Crc32Hex(Crc32(t.data.data(), t.data.size())))
            << "port " << port << " rank " << rank << " " << t.name;
      }
    }
  }

  std::string dir_;
  std::string socket_;
};

TEST_F(ProcessTest, EngineDyingMidBucketFailsTheUpdateAndAReplacementRecovers) {
  const int pa = FreePort(), pb = FreePort();
  auto sim_a = StartSim(pa, 1);
  auto sim_b = StartSim(pb, 2);
  auto daemon = StartDaemon();
  auto [rc, out] = Ctl({"create-group", "policy", "--engine", absl::StrCat("http://127.0.0.1:", pa),
                        "--engine", absl::StrCat("http://127.0.0.1:", pb, "#2")});
  ASSERT_EQ(rc, 0) << out;
  auto client = Connect();
  ASSERT_TRUE(client->OpenSession(0, "process test").ok());
  auto v1 = SmallModel(1);
  ASSERT_TRUE(client->Push("policy", "v1", Refs(v1)).ok());
  {
    // The next bucket sim b receives kills it halfway through.
    httplib::Client http("127.0.0.1", pb);
    auto knobs = nlohmann::json::parse(http.Post("/sim/knobs", "{}", "application/json")->body);
    auto r =
        http.Post("/sim/knobs",
                  absl::StrCat("{\"die_at_update\": ", knobs["updates_received"].get<int>(), "}"),
                  "application/json");
    ASSERT_TRUE(r && r->status == 200);
  }
  const absl::Time t0 = absl::Now();
  auto failed = client->Push("policy", "v2", Refs(SmallModel(2)));
  ASSERT_FALSE(failed.ok());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10)) << "bucket deadline is 5 s";
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  EXPECT_THAT(std::string(failed.status().message()),
              HasSubstr(absl::StrCat("engine http://127.0.0.1:", pb)));
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("died"));
  EXPECT_EQ(sim_b->Wait(absl::Seconds(5)), 17) << "the simulator was told to die";
  EXPECT_TRUE(daemon->running());
  auto [src, status_out] = Ctl({"group", "policy"});
  EXPECT_EQ(src, 0);
  EXPECT_THAT(status_out, HasSubstr("broken"));
  // Replace the dead engine on the same address; the group re-forms on the next update.
  sim_b = StartSim(pb, 2);
  auto v3 = SmallModel(3);
  auto ok = client->Push("policy", "v3", Refs(v3));
  ASSERT_TRUE(ok.ok()) << ok.status();
  ExpectEngineHolds(pa, v3, "v3", 1);
  ExpectEngineHolds(pb, v3, "v3", 2);
}

TEST_F(ProcessTest, WsyncctlShowsEverythingAsTablesAndJson) {
  const int pa = FreePort();
  auto sim = StartSim(pa, 2);
  auto daemon = StartDaemon();
  ASSERT_EQ(Ctl({"create-group", "policy", "--engine", absl::StrCat("http://127.0.0.1:", pa, "#2")})
                .first,
            0);
  auto client = Connect();
  ASSERT_TRUE(client->OpenSession(0, "ctl test").ok());
  ASSERT_TRUE(client->Push("policy", "step-7", Refs(SmallModel(7))).ok());

  auto [rc, groups] = Ctl({"groups"});
  EXPECT_EQ(rc, 0);
  EXPECT_THAT(groups, HasSubstr("NAME"));
  EXPECT_THAT(groups, HasSubstr("policy  sglang  ready"));
  EXPECT_THAT(Ctl({"group", "policy"}).second, HasSubstr("RANK OFFSET"));
  auto engines = Ctl({"engines"}).second;
  EXPECT_THAT(engines, HasSubstr("yes"));
  EXPECT_THAT(engines, HasSubstr("step-7"));
  auto buffers = Ctl({"buffers"}).second;
  EXPECT_THAT(buffers, HasSubstr("host-shm"));
  EXPECT_THAT(buffers, HasSubstr(client->session_id()));
  EXPECT_THAT(Ctl({"updates"}).second, HasSubstr("committed"));
  const std::string status = Ctl({"status"}).second;
  EXPECT_THAT(status, ::testing::ContainsRegex("updates committed +1\n"));
  EXPECT_THAT(status, ::testing::ContainsRegex("checksum +auto\n"));
  EXPECT_THAT(status, ::testing::ContainsRegex("gpu sharing +n/a \\(host mode\\)\n"));
  for (const std::string cmd : {"status", "groups", "engines", "buffers", "updates"}) {
    auto [jrc, json] = Ctl({"--json", cmd});
    EXPECT_EQ(jrc, 0) << cmd;
    EXPECT_FALSE(nlohmann::json::parse(json, nullptr, false).is_discarded()) << cmd << json;
  }
  auto j = nlohmann::json::parse(Ctl({"--json", "group", "policy"}).second);
  EXPECT_EQ(j["state"], "GROUP_STATE_READY");
  EXPECT_EQ(j["last_version"], "step-7");
  auto missing = Ctl({"group", "nope"});
  EXPECT_EQ(missing.first, 1);
  EXPECT_THAT(missing.second, HasSubstr("unknown group 'nope' (NOT_FOUND)"));
  // --json after the subcommand, as before it.
  auto after = Ctl({"groups", "--json"});
  EXPECT_EQ(after.first, 0);
  EXPECT_TRUE(nlohmann::json::parse(after.second, nullptr, false).is_object()) << after.second;
}

TEST_F(ProcessTest, WsyncctlSaysClearlyWhenNoDaemonRuns) {
  auto [rc, out] = Ctl({"status"});
  EXPECT_EQ(rc, 1) << "a failure, not a usage error";
  EXPECT_THAT(out, HasSubstr("wsyncd is not answering at unix:" + socket_));
  EXPECT_THAT(out, HasSubstr("(UNAVAILABLE)"));
}

// Every binary: 0 done (and after --help or --version), 1 failed, 2 a wrong command line.
TEST_F(ProcessTest, EveryBinaryTellsItsVersionAndExitsTwoOnAWrongCommandLine) {
  auto run = [&](std::vector<std::string> argv) {
    auto p = std::make_unique<ChildProcess>(std::move(argv), dir_ + "/cli.log", StateEnv());
    const int rc = p->Wait(absl::Seconds(10));
    return std::make_pair(rc, p->Log());
  };
  for (const std::string& bin : {std::string(WSYNCD_BIN), std::string(WSYNCCTL_BIN)}) {
    auto [rc, out] = run({bin, "--version"});
    EXPECT_EQ(rc, 0) << bin;
    EXPECT_THAT(out, HasSubstr(std::string(" ") + WSYNC_VERSION)) << bin;
    EXPECT_EQ(run({bin, "--no-such-flag"}).first, 2) << bin;
  }
  EXPECT_EQ(Ctl({"no-such-command"}).first, 2);
  EXPECT_EQ(Ctl({}).first, 2) << "a subcommand is required";
  EXPECT_EQ(Ctl({"--help"}).first, 0);
  // A command line wsyncctl can judge only once connected.
  auto daemon = StartDaemon();
  EXPECT_EQ(Ctl({"create-group", "g", "--engine", "http://127.0.0.1:1#x"}).first, 2);
}

TEST_F(ProcessTest, ConfigDeclaredGroupFormsAndSocketIsPrivateAndSigtermStopsCleanly) {
  const int pa = FreePort();
  auto sim = StartSim(pa, 1);
  const std::string config = dir_ + "/wsyncd.json";
  std::ofstream(config) << "{\"groups\": [{\"name\": \"policy\", \"kind\": \"sglang\", "
                           "\"engines\": [{\"url\": \"http://127.0.0.1:"
                        << pa << "\", \"ranks\": 1}]}]}";
  auto daemon = StartDaemon({"--config", config});
  struct stat st {};
  ASSERT_EQ(::stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::string group;
  while (absl::Now() < deadline) {
    group = Ctl({"group", "policy"}).second;
    if (group.find("ready") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT(group, HasSubstr("ready"));
  auto client = Connect();
  ASSERT_TRUE(client->OpenSession(0, "config test").ok());
  auto model = SmallModel(4);
  ASSERT_TRUE(client->Push("policy", "v4", Refs(model)).ok());
  ExpectEngineHolds(pa, model, "v4", 1);
  client.reset();
  daemon->Signal(SIGTERM);
  EXPECT_EQ(daemon->Wait(absl::Seconds(15)), 0) << daemon->Log();
  EXPECT_FALSE(std::filesystem::exists(socket_));
  // A second daemon may not take over a live socket.
  auto first = StartDaemon();
  auto second = std::make_unique<ChildProcess>(
      std::vector<std::string>{WSYNCD_BIN, "--mode", "host", "--socket", socket_, "--state-dir",
                               dir_ + "/second-state"},
      dir_ + "/second.log");
  EXPECT_EQ(second->Wait(absl::Seconds(10)), 1);
  EXPECT_THAT(second->Log(), HasSubstr("another wsyncd is already serving"));
}

TEST_F(ProcessTest, PullModeWsyncdReadsTheTrainersMemoryFromItsOwnProcess) {
  const int pa = FreePort();
  auto sim_a = StartSim(pa, 1);
  auto daemon = StartDaemon();
  auto [rc, out] =
      Ctl({"create-group", "policy", "--engine", absl::StrCat("http://127.0.0.1:", pa)});
  ASSERT_EQ(rc, 0) << out;
  auto client = Connect();
  ASSERT_TRUE(client->OpenSession(0, "pull test").ok());
  auto model = SmallModel(5);
  uint64_t total = 0;
  for (const auto& t : model) total += t.data.size();
  auto arena = client->NewSourceArena(total);
  ASSERT_TRUE(arena.ok()) << arena.status();
  std::vector<TensorRef> refs;
  uint64_t at = 0;
  for (const auto& t : model) {
    auto* dst = static_cast<uint8_t*>((*arena)->data()) + at;
    std::memcpy(dst, t.data.data(), t.data.size());
    refs.push_back({t.name, t.dtype, t.shape, dst, t.data.size()});
    at += t.data.size();
  }
  PushOptions options;
  options.pull = true;
  auto push = client->BeginPush("policy", "v5", std::move(options));
  ASSERT_TRUE(push.ok()) << push.status();
  ASSERT_TRUE((*push)->Add(refs).ok());
  auto result = (*push)->Commit();
  ASSERT_TRUE(result.ok()) << result.status() << daemon->Log();
  EXPECT_EQ(result->buckets_pulled, result->buckets);
  ExpectEngineHolds(pa, model, "v5", 1);
}

// The /dev/shm entries of process `pid` (host mode names every segment wsync-<pid>-...).
std::vector<std::string> SegmentsOf(int pid) {
  std::vector<std::string> out;
  const std::string prefix = absl::StrCat("wsync-", pid, "-");
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

TEST_F(ProcessTest, WsyncdRemovesItsSharedMemoryWhenItStopsAndSweepsWhatAKilledOneLeft) {
  // A clean stop removes every segment wsyncd made.
  auto daemon = StartDaemon();
  {
    auto client = Connect();
    ASSERT_TRUE(client->OpenSession(0, "shm test").ok());
    EXPECT_EQ(SegmentsOf(daemon->pid()).size(), 1u) << "one segment holds the device's slots";
  }
  daemon->Signal(SIGTERM);
  ASSERT_EQ(daemon->Wait(absl::Seconds(15)), 0) << daemon->Log();
  EXPECT_THAT(SegmentsOf(daemon->pid()), ::testing::IsEmpty());

  // A killed one leaves its segments behind (the slots' and an oversize slot's)...
  daemon = StartDaemon();
  {
    auto client = Connect();
    ASSERT_TRUE(client->OpenSession(0, "shm test").ok());
    ASSERT_TRUE(client->OversizeSlot(client->slot_bytes() + 1).ok());
  }
  const int killed = daemon->pid();
  daemon->Signal(SIGKILL);
  ASSERT_EQ(daemon->Wait(absl::Seconds(15)), 128 + SIGKILL);
  const std::vector<std::string> leftovers = SegmentsOf(killed);
  ASSERT_EQ(leftovers.size(), 2u);
  std::filesystem::remove(socket_);
  // ...which the next one removes when it starts, keeping those of a live process (this test's).
  const std::string live = absl::StrCat("/wsync-", ::getpid(), "-d0-0-1ea5e001");
  const int fd = ::shm_open(live.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  daemon = StartDaemon();
  auto client = Connect();
  ASSERT_NE(client, nullptr) << daemon->Log();
  EXPECT_THAT(SegmentsOf(killed), ::testing::IsEmpty());
  EXPECT_TRUE(std::filesystem::exists("/dev/shm" + live));
  ::shm_unlink(live.c_str());
  for (const std::string& name : leftovers) {
    EXPECT_THAT(daemon->Log(), HasSubstr(absl::StrCat("removed /dev/shm/", name)));
  }
  EXPECT_THAT(daemon->Log(), HasSubstr(absl::StrCat("left by pid ", killed, ", which is gone")));
}

nlohmann::json SimState(int port) {
  httplib::Client http("127.0.0.1", port);
  auto res = http.Get("/sim/checksums");
  return res && res->status == 200 ? nlohmann::json::parse(res->body) : nlohmann::json();
}

// The store port the state directory's record of group "policy" names (-1 when unreadable).
int RecordedStorePort(const std::string& state_dir) {
  std::ifstream in(state_dir + "/groups/policy.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j.value("store_port", -1) : -1;
}

// Every rank of the engine at `port` holds `name` as `t` has it.
bool Holds(int port, const OwnedTensor& t) {
  nlohmann::json j = SimState(port);
  if (!j.contains("ranks") || j["ranks"].empty()) return false;
  for (auto& [rank, tensors] : j["ranks"].items()) {
    if (tensors.value(t.name, "") != Crc32Hex(Crc32(t.data.data(), t.data.size()))) return false;
  }
  return true;
}

TEST_F(ProcessTest, AWsyncdKilledMidUpdateIsFollowedByOneThatCleansUpAndKeepsMixedEnginesPaused) {
  const int pa = FreePort(), pb = FreePort();
  auto sim_a = StartSim(pa, 1);
  auto sim_b = StartSim(pb, 2);
  const std::string url_a = absl::StrCat("http://127.0.0.1:", pa);
  const std::string url_b = absl::StrCat("http://127.0.0.1:", pb);
  const std::string config = dir_ + "/wsyncd.json";
  std::ofstream(config) << R"({"groups": [{"name": "policy", "engines": [{"url": ")" << url_a
                        << R"("}, {"url": ")" << url_b << R"(", "ranks": 2}]}]})";
  const std::vector<std::string> flags = {"--config", config, "--state-dir", dir_ + "/state"};
  auto daemon = StartDaemon(flags);
  ASSERT_THAT(WaitForGroup("ready"), HasSubstr("ready"));
  // The engines know the group by its name, this wsyncd's incarnation and a secret token.
  const std::string first_group = SimState(pa)["group"];
  EXPECT_THAT(first_group, ::testing::MatchesRegex("policy\\.[0-9a-f]{8}\\.[0-9a-f]{32}"));
  EXPECT_EQ(SimState(pb)["group"], first_group);
  auto v1 = SmallModel(1), v2 = SmallModel(2), v3 = SmallModel(3);
  {
    auto client = Connect();
    ASSERT_TRUE(client->OpenSession(0, "before the crash").ok());
    ASSERT_TRUE(client->Push("policy", "v1", Refs(v1)).ok());
    // Each engine takes a second per bucket: v2 is still on its way when wsyncd dies.
    for (int port : {pa, pb}) {
      httplib::Client http("127.0.0.1", port);
      ASSERT_TRUE(http.Post("/sim/knobs", R"({"answer_delay_ms": 1000})", "application/json"));
    }
    std::thread pusher([&] { (void)client->Push("policy", "v2", Refs(v2)); });
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!(Holds(pa, v2[0]) && Holds(pb, v2[0])) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    daemon->Signal(SIGKILL);
    EXPECT_EQ(daemon->Wait(absl::Seconds(5)), 128 + SIGKILL);
    pusher.join();
  }
  const int first_port = RecordedStorePort(dir_ + "/state");
  EXPECT_GT(first_port, 0);
  // What the issue describes: both engines paused, holding v2's tensors under the label v1 (how
  // many of v2's buckets they still take from their sockets' buffers after wsyncd died varies).
  for (int port : {pa, pb}) {
    httplib::Client http("127.0.0.1", port);
    ASSERT_TRUE(http.Post("/sim/knobs", R"({"answer_delay_ms": 0})", "application/json"));
    nlohmann::json state = SimState(port);
    EXPECT_EQ(state["paused"], true) << port;
    EXPECT_EQ(state["weight_version"], "v1") << port;
    EXPECT_TRUE(Holds(port, v2[0])) << port;
  }
  // The next wsyncd: the group forms (the engines dropped the dead one's group first) and the
  // engines are reported, and stay paused.
  std::filesystem::remove(socket_);
  daemon = StartDaemon(flags);
  const std::string group = WaitForGroup("ready");
  EXPECT_THAT(group, HasSubstr("ready")) << daemon->Log();
  EXPECT_THAT(group, ::testing::Not(HasSubstr("already initialized")));
  // Named with its token hidden: the log never holds a token.
  EXPECT_THAT(daemon->Log(), HasSubstr("dropped the group '" + first_group.substr(0, 15) +
                                       ".<secret>' an earlier wsyncd left"));
  EXPECT_THAT(daemon->Log(), ::testing::Not(HasSubstr(first_group.substr(16))));
  const std::string second_group = SimState(pa)["group"];
  EXPECT_THAT(second_group, ::testing::MatchesRegex("policy\\.[0-9a-f]{8}\\.[0-9a-f]{32}"));
  EXPECT_THAT(daemon->Log(), ::testing::Not(HasSubstr(second_group.substr(16))));
  EXPECT_NE(second_group, first_group);
  // A fresh store port too, recorded for the incarnation after this one.
  auto listed = nlohmann::json::parse(Ctl({"--json", "group", "policy"}).second);
  const std::string rendezvous = listed.value("rendezvous", "");
  EXPECT_THAT(rendezvous, ::testing::StartsWith("127.0.0.1:"));
  EXPECT_NE(rendezvous, absl::StrCat("127.0.0.1:", first_port));
  EXPECT_EQ(absl::StrCat("127.0.0.1:", RecordedStorePort(dir_ + "/state")), rendezvous);
  auto [erc, engines] = Ctl({"engines"});
  EXPECT_EQ(erc, 0) << engines;
  EXPECT_THAT(engines, HasSubstr("NEEDS FULL VERSION"));
  EXPECT_THAT(engines, HasSubstr("yes: wsyncd stopped during update u2 to version 'v2': the "
                                 "engine may hold tensors of 'v2' and of 'v1'"));
  auto json_engines = nlohmann::json::parse(Ctl({"--json", "engines"}).second);
  ASSERT_EQ(json_engines["engines"].size(), 2u);
  for (const auto& e : json_engines["engines"]) EXPECT_EQ(e["needs_full_version"], true);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(SimState(pa)["paused"], true);
  EXPECT_EQ(SimState(pb)["paused"], true);
  // An operator resumes engine a with what it holds; b waits for the trainer.
  auto [rrc, resumed] = Ctl({"resume-engine", "policy", "--engine", url_a});
  EXPECT_EQ(rrc, 0) << resumed;
  EXPECT_THAT(resumed, HasSubstr("resumed " + url_a));
  EXPECT_EQ(SimState(pa)["paused"], false);
  EXPECT_EQ(SimState(pb)["paused"], true);
  json_engines = nlohmann::json::parse(Ctl({"--json", "engines"}).second);
  for (const auto& e : json_engines["engines"]) {
    EXPECT_EQ(e["needs_full_version"], e["url"] == url_b) << e.dump();
  }
  // A complete update resumes b with the right bytes everywhere.
  auto client = Connect();
  ASSERT_TRUE(client->OpenSession(0, "after the crash").ok());
  auto pushed = client->Push("policy", "v3", Refs(v3));
  ASSERT_TRUE(pushed.ok()) << pushed.status() << daemon->Log();
  ExpectEngineHolds(pa, v3, "v3", 1);
  ExpectEngineHolds(pb, v3, "v3", 2);
  EXPECT_EQ(SimState(pb)["paused"], false);
  EXPECT_THAT(Ctl({"engines"}).second, ::testing::Not(HasSubstr("yes:")));
  auto [nrc, none] = Ctl({"resume-engine", "policy"});
  EXPECT_EQ(nrc, 1);
  EXPECT_THAT(none, HasSubstr("no engine of group 'policy' waits for a full version"));
}

// Without --state-dir, wsyncd keeps its records in the default directory ($XDG_STATE_HOME/wsync
// here): one killed and started again the same way finds the group it made, has the engine drop
// the engine group the dead one left, and the trainer's next update lands with no engine restart.
TEST_F(ProcessTest, AKilledWsyncdStartedAgainWithTheDefaultStateDirReformsTheGroup) {
  const int pa = FreePort();
  auto sim = StartSim(pa, 2);
  auto daemon = StartDaemon();
  const std::vector<std::string> create = {"create-group", "policy", "--engine",
                                           absl::StrCat("http://127.0.0.1:", pa, "#2")};
  auto [crc, created] = Ctl(create);
  ASSERT_EQ(crc, 0) << created;
  {
    auto client = Connect();
    ASSERT_TRUE(client->OpenSession(0, "before the crash").ok());
    ASSERT_TRUE(client->Push("policy", "v1", Refs(SmallModel(1))).ok());
  }
  const std::string first_group = SimState(pa)["group"];
  ASSERT_THAT(first_group, ::testing::MatchesRegex("policy\\.[0-9a-f]{8}\\.[0-9a-f]{32}"));
  EXPECT_TRUE(std::filesystem::exists(state_home() + "/wsync/groups/policy.json"));
  daemon->Signal(SIGKILL);
  ASSERT_EQ(daemon->Wait(absl::Seconds(5)), 128 + SIGKILL);

  std::filesystem::remove(socket_);
  daemon = StartDaemon();
  // The trainer starts as it did before the crash: creating the group it has is a no-op.
  auto [rc, out] = Ctl(create);
  EXPECT_EQ(rc, 0) << out << daemon->Log();
  auto client = Connect();
  ASSERT_TRUE(client->OpenSession(0, "after the crash").ok());
  auto v2 = SmallModel(2);
  auto pushed = client->Push("policy", "v2", Refs(v2));
  ASSERT_TRUE(pushed.ok()) << pushed.status() << daemon->Log();
  ExpectEngineHolds(pa, v2, "v2", 2);
  // Named with its token hidden (the token never reaches a log).
  const std::string shown = first_group.substr(0, first_group.rfind('.')) + ".<secret>";
  EXPECT_THAT(daemon->Log(), HasSubstr("dropped the group '" + shown + "' an earlier wsyncd left"));
  EXPECT_THAT(daemon->Log(), ::testing::Not(HasSubstr(first_group)));
  EXPECT_THAT(daemon->Log(), HasSubstr("state directory " + state_home() +
                                       "/wsync (the default: $XDG_STATE_HOME/wsync"));
  EXPECT_TRUE(sim->running()) << "the engine was never restarted";
}

// One wsyncd per state directory, the default one included: a second is refused at start,
// naming the first's pid and how to give it another; '' runs without one.
TEST_F(ProcessTest, ASecondWsyncdOnTheSameStateDirIsRefusedNamingTheFirst) {
  auto first = StartDaemon();
  ASSERT_TRUE(first->running()) << first->Log();
  auto second = std::make_unique<ChildProcess>(
      std::vector<std::string>{WSYNCD_BIN, "--mode", "host", "--socket", dir_ + "/second.sock"},
      dir_ + "/second.log", StateEnv());
  EXPECT_EQ(second->Wait(absl::Seconds(10)), 1) << second->Log();
  EXPECT_THAT(second->Log(),
              HasSubstr(absl::StrCat("state directory ", state_home(),
                                     "/wsync is in use by wsyncd pid ", first->pid())));
  EXPECT_THAT(second->Log(), HasSubstr("--state-dir"));
  std::ifstream lock(state_home() + "/wsync/lock");
  int holder = 0;
  lock >> holder;
  EXPECT_EQ(holder, first->pid());
  struct stat st {};
  ASSERT_EQ(::stat((state_home() + "/wsync").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  auto stateless = std::make_unique<ChildProcess>(
      std::vector<std::string>{WSYNCD_BIN, "--mode", "host", "--socket", dir_ + "/third.sock",
                               "--state-dir", ""},
      dir_ + "/third.log", StateEnv());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!std::filesystem::exists(dir_ + "/third.sock") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(stateless->running()) << stateless->Log();
  EXPECT_THAT(stateless->Log(), HasSubstr("--state-dir '': if wsyncd dies"));
}

TEST_F(ProcessTest, AnEngineThatCannotJoinAfterARestartIsNamedAsNeedingOne) {
  const int pa = FreePort(), pb = FreePort();
  auto sim_a = StartSim(pa, 1);
  auto sim_b = StartSim(pb, 1);
  const std::string url_a = absl::StrCat("http://127.0.0.1:", pa);
  const std::string url_b = absl::StrCat("http://127.0.0.1:", pb);
  const std::string config = dir_ + "/wsyncd.json";
  std::ofstream(config) << R"({"groups": [{"name": "policy", "engines": [{"url": ")" << url_a
                        << R"("}, {"url": ")" << url_b << R"("}]}]})";
  const std::vector<std::string> flags = {"--config", config, "--state-dir", dir_ + "/state"};
  auto daemon = StartDaemon(flags);
  ASSERT_THAT(WaitForGroup("ready"), HasSubstr("ready"));
  const std::string first_group = SimState(pb)["group"];
  // Engine b's ranks are wedged in the group: it cannot drop it, so it cannot join another.
  httplib::Client http_b("127.0.0.1", pb);
  ASSERT_TRUE(http_b.Post("/sim/knobs", R"({"fail_destroy": true})", "application/json"));
  daemon->Signal(SIGKILL);
  EXPECT_EQ(daemon->Wait(absl::Seconds(5)), 128 + SIGKILL);

  std::filesystem::remove(socket_);
  daemon = StartDaemon(flags);
  const std::string group = WaitForGroup("broken");
  EXPECT_THAT(group, HasSubstr("broken")) << daemon->Log();
  // By name: b needs a restart, and why; a joined (then left the failed formation) and does not.
  // The group is named with its token hidden, there and in the log.
  const std::string needs =
      "engine " + url_b + " failed to join after wsyncd restarted and may still hold the group '" +
      first_group.substr(0, 15) + ".<secret>' an earlier wsyncd made: restart it";
  EXPECT_THAT(daemon->Log(), ::testing::Not(HasSubstr(first_group.substr(16))));
  EXPECT_THAT(group, HasSubstr(needs));
  auto [erc, engines] = Ctl({"engines"});
  EXPECT_EQ(erc, 0);
  EXPECT_THAT(engines, HasSubstr("needs a restart: " + needs));
  auto json_engines = nlohmann::json::parse(Ctl({"--json", "engines"}).second);
  ASSERT_EQ(json_engines["engines"].size(), 2u);
  for (const auto& e : json_engines["engines"]) {
    EXPECT_EQ(e.value("needs_restart", ""), e["url"] == url_b ? needs : "") << e.dump();
  }
  // a dropped both the stale group and the failed one.
  EXPECT_EQ(SimState(pa)["group"], "");
  // Until a formation succeeds, the record keeps the old name, to be asked again (also by the
  // incarnation after another crash).
  auto record = [&] {
    std::ifstream in(dir_ + "/state/groups/policy.json");
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  };
  EXPECT_EQ(record().value("stale_engine_groups", nlohmann::json()),
            nlohmann::json::array({first_group}));
  EXPECT_NE(record().value("engine_group", ""), first_group);

  // The operator restarts b; the next update forms the group and lands everywhere.
  sim_b->Signal(SIGTERM);
  sim_b->Wait(absl::Seconds(5));
  sim_b = StartSim(pb, 1);
  auto client = Connect();
  ASSERT_TRUE(client->OpenSession(0, "after the restart").ok());
  auto v1 = SmallModel(1);
  auto pushed = client->Push("policy", "v1", Refs(v1));
  ASSERT_TRUE(pushed.ok()) << pushed.status() << daemon->Log();
  ExpectEngineHolds(pa, v1, "v1", 1);
  ExpectEngineHolds(pb, v1, "v1", 1);
  EXPECT_THAT(Ctl({"engines"}).second, ::testing::Not(HasSubstr("needs a restart")));
  EXPECT_EQ(record().value("stale_engine_groups", nlohmann::json()), nlohmann::json::array());
}

TEST_F(ProcessTest, EnginesOutsideEngineNetworksAreRefusedOnEveryPath) {
  // Default: loopback and the config's own hosts (none here), so wsyncctl's group elsewhere is
  // refused, naming the engine and the rule.
  {
    auto daemon = StartDaemon();
    auto [rc, out] = Ctl({"create-group", "policy", "--engine", "http://10.255.0.1:30000",
                          "--engine", "http://127.0.0.1:30000"});
    EXPECT_EQ(rc, 1) << out;
    EXPECT_THAT(out,
                HasSubstr("engine http://10.255.0.1:30000 is not allowed by engine_networks: "
                          "10.255.0.1 is not in 127.0.0.0/8, ::1, localhost (PERMISSION_DENIED)"));
  }
  std::filesystem::remove(socket_);  // the killed daemon's
  // Given with the flag: it replaces the default.
  {
    auto daemon = StartDaemon({"--engine-networks", "10.255.0.0/16,fd00::/8"});
    auto [rc, out] = Ctl({"create-group", "policy", "--engine", "http://127.0.0.1:30000"});
    EXPECT_EQ(rc, 1) << out;
    EXPECT_THAT(out, HasSubstr("127.0.0.1 is not in 10.255.0.0/16, fd00::/8"));
  }
  std::filesystem::remove(socket_);
  // A config group outside the config's own list stops the daemon at start.
  const std::string config = dir_ + "/wsyncd.json";
  std::ofstream(config) << R"({"engine_networks": ["127.0.0.1"], "groups": [{"name": "policy",
      "engines": [{"url": "http://10.255.0.1:30000"}]}]})";
  auto refused = std::make_unique<ChildProcess>(
      std::vector<std::string>{WSYNCD_BIN, "--mode", "host", "--socket", socket_, "--config",
                               config},
      dir_ + "/refused.log", StateEnv());
  EXPECT_EQ(refused->Wait(absl::Seconds(10)), 1);
  EXPECT_THAT(refused->Log(),
              HasSubstr("config group 'policy': group 'policy': engine http://10.255.0.1:30000 is "
                        "not allowed by engine_networks"));
}

TEST_F(ProcessTest, CudaModeIsNeverASilentFallback) {
  auto p = std::make_unique<ChildProcess>(std::vector<std::string>{WSYNCD_BIN, "--socket", socket_},
                                          dir_ + "/cuda.log", StateEnv());
  EXPECT_EQ(p->Wait(absl::Seconds(10)), 1);
  EXPECT_THAT(p->Log(), HasSubstr("--mode=host"));
  // A wsyncd built without CUDA (the sanitized build) says so instead of looking for a device.
#ifdef WSYNC_HAVE_CUDA
  // The machines that build wsync have the toolkit but no driver: said as such, not as a driver
  // too old.
  EXPECT_THAT(p->Log(), HasSubstr("no NVIDIA driver was found (libcuda.so.1 cannot be loaded"));
#else
  EXPECT_THAT(p->Log(), HasSubstr("this wsyncd was built without CUDA"));
#endif
  EXPECT_FALSE(std::filesystem::exists(socket_));
}

}  // namespace
}  // namespace wsync
