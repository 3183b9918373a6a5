// Who counts as an engine rank in a group's store. Any local process can connect to the store and
// send what a torch client sends when it connects (VALIDATE, PING, ADD "init/"); only a process
// wsyncd told the group's name can name the group's keys. A rank is admitted by the second, so a
// stranger that connects first can neither take a rank's place, nor evict one, nor read the NCCL
// id.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/core/engine_group_name.h"
#include "daemon/core/peer_text.h"
#include "daemon/rendezvous/store_state.h"
#include "daemon/rendezvous/tcp_store_server.h"
#include "daemon/transport/broadcast/torch_store_rendezvous.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/rendezvous/store_wire.h"
#include "tests/sim/tcp_store_client.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A group name as wsyncd makes them: the group, the incarnation, and the secret token.
constexpr char kToken[] = "00112233445566778899aabbccddeeff";
const std::string kGroup = absl::StrCat("policy.0a1b2c3d.", kToken);
const std::string kIdKey = absl::StrCat("/", kGroup, "/", kGroup, "//cuda//0");
const std::string kId(128, 'i');

std::string I64(int64_t v) { return std::string(reinterpret_cast<char*>(&v), 8); }

StoreRequest Request(StoreCommand command, std::vector<std::string> keys = {},
                     std::vector<std::string> values = {}) {
  StoreRequest r;
  r.command = command;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

// One client connection of a StoreState, as the server drives it.
class Client {
 public:
  Client(StoreState& state, uint64_t connection) : state_(state), connection_(connection) {
    state_.Open(connection_);
  }
  StoreState::Outcome Do(StoreRequest r) { return state_.Apply(connection_, r); }
  // What a torch client sends when it connects, up to its ADD of "init/".
  StoreState::Outcome Connect(uint32_t pid) {
    StoreRequest validate = Request(StoreCommand::kValidate);
    validate.u32 = StoreState::kValidationMagic;
    EXPECT_TRUE(Do(validate).error.empty());
    StoreRequest ping = Request(StoreCommand::kPing);
    ping.u32 = pid;
    EXPECT_TRUE(Do(ping).error.empty());
    StoreRequest add = Request(StoreCommand::kAdd, {StoreState::kInitKey});
    add.delta = 1;
    return Do(add);
  }
  StoreState::Outcome Wait(const std::string& key) {
    return Do(Request(StoreCommand::kWait, {key}));
  }
  StoreState::Outcome Get(const std::string& key) { return Do(Request(StoreCommand::kGet, {key})); }
  uint64_t connection() const { return connection_; }

 private:
  StoreState& state_;
  uint64_t connection_;
};

TEST(StoreRegistration, StrangersThatAddInitFirstTakeNoRankEvictNoneAndCannotReadTheId) {
  StoreState state{StoreLimits{}};
  state.set_max_registered(2);  // one engine of TP 2
  state.set_rank_prefix(absl::StrCat("/", kGroup, "/"));
  ASSERT_TRUE(state.Set(kIdKey, kId).ok());
  // Three strangers connect before the engine's ranks and do all a torch client does before its
  // first collective, and more: wait for and read keys they can guess, write keys of their own.
  std::vector<std::unique_ptr<Client>> strangers;
  for (uint64_t c = 1; c <= 3; ++c) {
    auto& s = *strangers.emplace_back(std::make_unique<Client>(state, c));
    const StoreState::Outcome added = s.Connect(900 + c);
    EXPECT_EQ(added.error, "") << "stranger " << c;
    EXPECT_EQ(added.reply, I64(static_cast<int64_t>(c)));
    EXPECT_EQ(s.Wait("/policy/policy//cuda//0").error, "");
    EXPECT_EQ(s.Get("/policy.0a1b2c3d/policy.0a1b2c3d//cuda//0").reply, Str(""));
    EXPECT_EQ(s.Get("/broadcast_from/0/0").reply, Str(""));
    EXPECT_EQ(s.Do(Request(StoreCommand::kSet, {absl::StrCat("/mine/", c)}, {"v"})).error, "");
    EXPECT_FALSE(state.Registered(c));
  }
  EXPECT_EQ(state.registered_open(), 0u);
  // The engine's two ranks connect as torch does, and are admitted as ranks when they fetch the
  // id at their first collective: by naming the group, which the strangers cannot.
  std::vector<std::unique_ptr<Client>> ranks;
  for (uint64_t r = 11; r <= 12; ++r) {
    auto& rank = *ranks.emplace_back(std::make_unique<Client>(state, r));
    const StoreState::Outcome added = rank.Connect(static_cast<uint32_t>(100 + r));
    ASSERT_EQ(added.error, "") << "rank " << r << " was refused";
    EXPECT_EQ(added.reply, I64(static_cast<int64_t>(r - 7)));
    EXPECT_FALSE(state.Registered(r));
    // Kept however long it stays silent until then: SGLang's ranks fetch the id at the first
    // update, which may come hours after the group formed.
    EXPECT_TRUE(state.Holds(r));
  }
  EXPECT_EQ(state.announced_open(), 5u);
  for (auto& rank : ranks) {
    EXPECT_EQ(rank->Wait(kIdKey).reply, std::string(1, '\0'));
    EXPECT_TRUE(state.Registered(rank->connection()));
    EXPECT_EQ(rank->Get(kIdKey).reply, Str(kId));
  }
  EXPECT_EQ(state.registered_open(), 2u);
  EXPECT_THAT(state.FetchersOf(kIdKey), ::testing::UnorderedElementsAre(111u, 112u));
  // With every rank present, a stranger is an idle connection like any other.
  for (auto& s : strangers) EXPECT_FALSE(state.Holds(s->connection()));
  // Even a client that learned the name gets nothing once every rank is there.
  Client late(state, 20);
  EXPECT_EQ(late.Connect(920).error, "");
  const StoreState::Outcome got = late.Get(kIdKey);
  EXPECT_THAT(got.error, HasSubstr("all 2 engine ranks"));
  EXPECT_EQ(got.reply, "");
  // Strangers leaving evict no one; a rank leaving is seen, by its pid.
  for (uint64_t c : {1, 2, 3, 20}) state.Close(c);
  EXPECT_TRUE(state.RanksLeft().empty());
  EXPECT_EQ(state.registered_open(), 2u);
  state.Close(12);
  EXPECT_THAT(state.RanksLeft(), ::testing::ElementsAre(112u));
}

TEST(StoreRegistration, WithoutAGroupPrefixOnlyARankReadsWhatTheDaemonPublished) {
  // vLLM's stateless store: its keys name no group, so ADD "init/" is what registers a rank.
  StoreState state{StoreLimits{}};
  state.set_max_registered(1);
  ASSERT_TRUE(state.Set("/broadcast_from/0/0", "pickled id").ok());
  Client reader(state, 1);
  StoreRequest validate = Request(StoreCommand::kValidate);
  validate.u32 = StoreState::kValidationMagic;
  ASSERT_EQ(reader.Do(validate).error, "");
  const StoreState::Outcome unregistered = reader.Get("/broadcast_from/0/0");
  EXPECT_THAT(unregistered.error, HasSubstr("not an engine rank"));
  EXPECT_EQ(unregistered.reply, "");
  Client rank(state, 2);
  ASSERT_EQ(rank.Connect(7).error, "");
  EXPECT_TRUE(state.Registered(2));
  EXPECT_EQ(rank.Get("/broadcast_from/0/0").reply, Str("pickled id"));
}

bool Eventually(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

TEST(StoreRegistration, ARendezvousFormsAndFetchesWithStrangersRegisteredBeforeItsRanks) {
  TorchStoreRendezvous rendezvous(RendezvousMode::kTorchStore, "127.0.0.1", "127.0.0.1", {});
  auto opened = rendezvous.Open(kGroup, kId, /*world_size=*/3);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const uint16_t port = opened->master_port;
  auto connect = [&](uint32_t pid) {
    return TcpStoreClient::Connect("127.0.0.1", port, pid, absl::Now() + absl::Seconds(5));
  };
  std::vector<std::unique_ptr<TcpStoreClient>> strangers;
  for (uint32_t pid : {901, 902, 903}) {
    auto s = connect(pid);
    ASSERT_TRUE(s.ok()) << s.status();
    strangers.push_back(std::move(*s));
  }
  std::vector<std::unique_ptr<TcpStoreClient>> ranks;
  for (uint32_t pid : {101, 102}) {
    auto r = connect(pid);
    ASSERT_TRUE(r.ok()) << "engine rank " << pid << " refused: " << r.status();
    ranks.push_back(std::move(*r));
  }
  ASSERT_TRUE(rendezvous.WaitJoined(absl::Now() + absl::Seconds(5)).ok());
  EXPECT_TRUE(rendezvous.CheckJoined().ok());
  // The first collective: each rank fetches the id.
  for (auto& r : ranks) {
    ASSERT_TRUE(r->Wait({kIdKey}, absl::Seconds(5)).ok());
    auto id = r->Get(kIdKey);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, kId);
  }
  // Strangers that leave are no engine that restarted.
  strangers.clear();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_TRUE(rendezvous.CheckJoined().ok()) << rendezvous.CheckJoined();
  ranks.pop_back();
  ASSERT_TRUE(Eventually([&] { return !rendezvous.CheckJoined().ok(); }));
  EXPECT_THAT(rendezvous.CheckJoined().message(), HasSubstr("(pids 102)"));
}

TEST(StoreRegistration, ConnectionsThatAddedInitAreKeptOnlyUntilEveryRankNamedTheGroup) {
  TcpStoreServer::Options options;
  options.limits.idle_timeout = absl::Milliseconds(300);
  options.max_registered = 1;
  options.rank_prefix = absl::StrCat("/", kGroup, "/");
  auto started = TcpStoreServer::Start("127.0.0.1", 0, options);
  ASSERT_TRUE(started.ok()) << started.status();
  TcpStoreServer& store = **started;
  ASSERT_TRUE(store.Set(kIdKey, kId).ok());
  auto connect = [&](uint32_t pid) {
    auto c =
        TcpStoreClient::Connect("127.0.0.1", store.port(), pid, absl::Now() + absl::Seconds(5));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  };
  auto stranger = connect(901);
  auto rank = connect(101);
  ASSERT_TRUE(stranger && rank);
  // Silent past the idle timeout, both are kept: either may be the rank still to come.
  absl::SleepFor(absl::Milliseconds(700));
  EXPECT_EQ(store.connections_open(), 2);
  EXPECT_EQ(store.AnnouncedOpen(), 2u);
  EXPECT_EQ(store.RegisteredOpen(), 0u);
  // The rank names the group at its first collective; the stranger is then idle like any client.
  ASSERT_TRUE(rank->Wait({kIdKey}, absl::Seconds(5)).ok());
  EXPECT_EQ(store.RegisteredOpen(), 1u);
  EXPECT_TRUE(Eventually([&] { return store.counters().closed_deadline == 1; }));
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(store.connections_open(), 1);
  auto id = rank->Get(kIdKey);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, kId);
}

TEST(StoreRegistration, WhatTheRendezvousReportsNeverHoldsTheGroupsToken) {
  TorchStoreRendezvous rendezvous(RendezvousMode::kTorchStore, "127.0.0.1", "127.0.0.1", {});
  auto opened = rendezvous.Open(kGroup, kId, /*world_size=*/3);
  ASSERT_TRUE(opened.ok()) << opened.status();
  auto rank = TcpStoreClient::Connect("127.0.0.1", opened->master_port, 101,
                                      absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(rank.ok()) << rank.status();
  // One rank of two: the formation's error names the group without its token.
  const absl::Status joined = rendezvous.WaitJoined(absl::Now() + absl::Milliseconds(300));
  EXPECT_THAT(joined.message(), HasSubstr("policy.0a1b2c3d"));
  EXPECT_THAT(joined.message(), Not(HasSubstr(kToken)));
  // A rank waiting for a key of the group that was never published: the diagnosis names it, with
  // the token hidden.
  (void)(*rank)->Wait({absl::StrCat("/", kGroup, "/", kGroup, "//cuda//1")},
                      absl::Milliseconds(100));
  const std::string report = rendezvous.Diagnose();
  EXPECT_THAT(report, HasSubstr("//cuda//1"));
  EXPECT_THAT(report, HasSubstr("//cuda//0"));
  EXPECT_THAT(report, Not(HasSubstr(kToken)));
}

TEST(EngineGroupName, CarriesAFreshTokenEachTimeAndIsShownWithItHidden) {
  const std::string a = EngineGroupName("policy", "0a1b2c3d");
  const std::string b = EngineGroupName("policy", "0a1b2c3d");
  EXPECT_THAT(a, ::testing::MatchesRegex("policy\\.0a1b2c3d\\.[0-9a-f]{32}"));
  EXPECT_NE(a, b);
  EXPECT_EQ(EngineGroupToken(a), a.substr(16));
  EXPECT_EQ(ShownEngineGroup(a), "policy.0a1b2c3d.<secret>");
  // Tests make groups without an incarnation: the bare name, nothing to hide.
  EXPECT_EQ(EngineGroupName("policy", ""), "policy");
  EXPECT_EQ(EngineGroupToken("policy"), "");
  EXPECT_EQ(ShownEngineGroup("policy"), "policy");
}

TEST(EngineGroupName, RedactionHidesEveryTokenAndNothingElse) {
  const std::string old_token(32, 'e');
  // SGLang's answer to an update for a group it does not hold lists the groups it does.
  EXPECT_EQ(RedactEngineGroupTokens(absl::StrCat("Group ", kGroup, " not in ['old.00000000.",
                                                 old_token, "']. Please call init first.")),
            "Group policy.0a1b2c3d.<secret> not in ['old.00000000.<secret>']. Please call init "
            "first.");
  EXPECT_EQ(RedactEngineGroupTokens(kIdKey),
            "/policy.0a1b2c3d.<secret>/policy.0a1b2c3d.<secret>//cuda//0");
  for (const std::string& kept :
       {absl::StrCat("v.", std::string(33, 'a')), absl::StrCat("v.", std::string(31, 'a')),
        absl::StrCat("v.", std::string(32, 'A')), absl::StrCat("v", std::string(32, 'a')),
        absl::StrCat("v.", std::string(32, 'a'), "g"), std::string("checksum 0a1b2c3d")}) {
    EXPECT_EQ(RedactEngineGroupTokens(kept), kept);
  }
}

TEST(EngineGroupName, PeerTextHidesATokenEvenWhereTheCutFallsInsideIt) {
  const std::string body = absl::StrCat(R"({"message": "group ')", kGroup, R"(' not found"})");
  for (size_t max = 20; max < body.size() + 4; ++max) {
    const std::string shown = SanitizePeerText(body, max);
    EXPECT_THAT(shown, Not(HasSubstr("00112233"))) << max;
    EXPECT_LE(shown.size(), max + 3) << max;
  }
  EXPECT_EQ(SanitizePeerText(body, 1024),
            R"({"message": "group 'policy.0a1b2c3d.<secret>' not found"})");
}

}  // namespace
}  // namespace wsync
