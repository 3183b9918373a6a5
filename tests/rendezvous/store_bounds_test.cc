// The store's bounds: what one client, or many, can make wsyncd spend (threads, mappings,
// memory, descriptors, CPU, time under the daemon's locks), and who may connect at all.

#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "absl/time/clock.h"
#include "daemon/rendezvous/store_protocol.h"
#include "daemon/rendezvous/tcp_store_server.h"
#include "gtest/gtest.h"
#include "tests/rendezvous/store_wire.h"

namespace wsync {
namespace {

int CountLines(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}

int64_t ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

std::unique_ptr<TcpStoreServer> StartStore(TcpStoreServer::Options options = {}) {
  auto s = TcpStoreServer::Start("127.0.0.1", 0, std::move(options));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

bool Eventually(const std::function<bool()>& done, absl::Duration within = absl::Seconds(5)) {
  const absl::Time deadline = absl::Now() + within;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// What a torch client sends once validated: ADD "init/" 1. Without a rank prefix it makes the
// connection an engine rank, which may read what the daemon published.
void Register(RawConn& c) {
  c.Send("\x04" + Str("init/") + U64(1));
  EXPECT_EQ(c.Read(8).size(), 8u);
}

TEST(StoreParseTest, AnOversizeLengthIsRefusedBeforeItsBytesArrive) {
  StoreLimits limits;
  // SET announcing a value one byte over the limit: malformed with only the header buffered.
  std::string frame = "\x01" + Str("/k") + U64(limits.max_value_bytes + 1);
  StoreParse p = ParseStoreRequest(frame, limits);
  EXPECT_EQ(p.kind, StoreParse::kMalformed);
  EXPECT_NE(p.error.find("value of"), std::string::npos) << p.error;
  // Within the limit: the parser asks for exactly the rest of the frame.
  frame = "\x01" + Str("/k") + U64(1000);
  p = ParseStoreRequest(frame, limits);
  EXPECT_EQ(p.kind, StoreParse::kNeedMore);
  EXPECT_EQ(p.need, frame.size() + 1000);
  // A MULTI_GET naming more keys than allowed.
  p = ParseStoreRequest("\x0a" + U64(limits.max_keys_per_request + 1), limits);
  EXPECT_EQ(p.kind, StoreParse::kMalformed);
  // A frame whose parts are each legal but whose sum is over the frame limit.
  limits.max_request_bytes = 64;
  p = ParseStoreRequest(
      "\x0b" + U64(3) + Str("/a") + Str(std::string(30, 'x')) + Str("/b") + U64(30), limits);
  EXPECT_EQ(p.kind, StoreParse::kMalformed);
  EXPECT_NE(p.error.find("request frame exceeds"), std::string::npos) << p.error;
}

TEST(StoreBoundsTest, ShortConnectionsLeaveNoThreadOrMappingBehind) {
  auto store = StartStore();
  const int maps_before = CountLines("/proc/self/maps");
  for (int i = 0; i < 1500; ++i) {
    RawConn c(store->port());
    c.Validate();
    c.Send("\x0d" + std::string(4, '\x01'));
    ASSERT_EQ(c.Read(4), std::string(4, '\x01'));
  }
  ASSERT_TRUE(Eventually([&] { return store->connections_open() == 0; }));
  // A thread per connection that is never joined keeps its stack mapped: 1500 of them here.
  EXPECT_LT(CountLines("/proc/self/maps") - maps_before, 50);
}

TEST(StoreBoundsTest, AMultiGetWhoseReplyWouldExceedTheCapClosesOnlyThatConnection) {
  auto store = StartStore();
  const StoreLimits limits;
  ASSERT_TRUE(store->Set("/big", std::string(limits.max_value_bytes, 'b')).ok());
  const int64_t rss_before = ResidentBytes();
  RawConn bad(store->port());
  bad.Validate();
  Register(bad);
  std::string frame = "\x0a" + U64(limits.max_keys_per_request);
  for (uint64_t i = 0; i < limits.max_keys_per_request; ++i) frame += Str("/big");
  bad.Send(frame);
  EXPECT_TRUE(bad.Closed());
  EXPECT_EQ(store->counters().closed_protocol, 1u);
  EXPECT_LT(ResidentBytes() - rss_before, 64 << 20);
  RawConn ok(store->port());
  ok.Validate();
  Register(ok);
  ok.Send("\x03" + Str("/big"));
  EXPECT_EQ(ok.Read(8 + limits.max_value_bytes).size(), 8 + limits.max_value_bytes);
}

TEST(StoreBoundsTest, AnnouncedLengthsAreNotAllocatedBeforeTheBytesArrive) {
  auto store = StartStore();
  const StoreLimits limits;
  const int64_t rss_before = ResidentBytes();
  std::vector<RawConn> conns(48);
  for (auto& c : conns) {
    c = RawConn(store->port());
    c.Validate();
    c.Send("\x01" + Str("/k") + U64(limits.max_value_bytes) + "x");  // 1 byte of 1 MiB
  }
  ASSERT_TRUE(Eventually([&] { return store->connections_open() == 48; }));
  absl::SleepFor(absl::Milliseconds(200));
  // Zero-filling every announced value would add 48 MiB.
  EXPECT_LT(ResidentBytes() - rss_before, 16 << 20);
}

TEST(StoreBoundsTest, AClientThatNeverReadsNeitherBlocksTheDaemonNorStaysForever) {
  TcpStoreServer::Options options;
  options.limits.frame_timeout = absl::Milliseconds(500);
  auto store = StartStore(options);
  ASSERT_TRUE(store->Set("/v", std::string(options.limits.max_value_bytes, 'v')).ok());
  RawConn stuck(store->port());
  int small = 4096;
  ::setsockopt(stuck.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  stuck.Validate();
  Register(stuck);
  std::string gets;
  for (int i = 0; i < 64; ++i) gets += "\x03" + Str("/v");
  stuck.Send(gets);  // 64 MiB of replies it never reads
  absl::SleepFor(absl::Milliseconds(100));
  // The daemon's hooks take the store's lock; they must not wait on that client.
  const absl::Time start = absl::Now();
  ASSERT_TRUE(store->Set("/id", "x").ok());
  (void)store->ConnectedPids();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(250));
  // And the client is closed once its replies stop moving for the frame timeout.
  ASSERT_TRUE(Eventually([&] { return store->counters().closed_deadline == 1; }));
  EXPECT_EQ(store->connections_open(), 0);
}

TEST(StoreBoundsTest, ConnectionsOverTheLimitAreClosedAtOnceAndRoomReturns) {
  TcpStoreServer::Options options;
  options.limits.max_connections = 4;
  auto store = StartStore(options);
  std::vector<RawConn> held(4);
  for (auto& c : held) {
    c = RawConn(store->port());
    c.Validate();
  }
  ASSERT_TRUE(Eventually([&] { return store->connections_open() == 4; }));
  RawConn extra(store->port());
  EXPECT_TRUE(extra.Closed(absl::Seconds(2)));
  EXPECT_EQ(store->counters().refused_full, 1u);
  held.clear();
  ASSERT_TRUE(Eventually([&] { return store->connections_open() == 0; }));
  RawConn later(store->port());
  later.Validate();
  later.Send("\x0d" + std::string(4, '\x02'));
  EXPECT_EQ(later.Read(4), std::string(4, '\x02'));
}

TEST(StoreBoundsTest, HandshakeFrameAndIdleDeadlinesCloseConnectionsButNotEngineRanks) {
  TcpStoreServer::Options options;
  options.limits.handshake_timeout = absl::Milliseconds(300);
  options.limits.frame_timeout = absl::Milliseconds(300);
  options.limits.idle_timeout = absl::Milliseconds(300);
  auto store = StartStore(options);
  RawConn silent(store->port());  // never validates
  RawConn partial(store->port());
  partial.Validate();
  partial.Send("\x01" + Str("/k") + U64(100) + "only-part");
  RawConn idle(store->port());
  idle.Validate();
  RawConn rank(store->port());  // registers like a torch rank, then stays quiet
  rank.Validate();
  rank.Send("\x04" + Str("init/") + U64(1));
  ASSERT_EQ(rank.Read(8), U64(1));
  // Waiting for a key that never comes is no reason to keep a slot: anyone can do it.
  RawConn waiter(store->port());
  waiter.Validate();
  waiter.Send("\x06" + U64(1) + Str("/never"));
  EXPECT_TRUE(silent.Closed());
  EXPECT_TRUE(partial.Closed());
  EXPECT_TRUE(idle.Closed());
  EXPECT_TRUE(waiter.Closed());
  EXPECT_EQ(store->counters().closed_deadline, 4u);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(store->connections_open(), 1);
  EXPECT_EQ(store->RegisteredOpen(), 1u);
  rank.Send("\x03" + Str("init/"));
  EXPECT_EQ(rank.Read(9), Str("1"));
}

TEST(StoreBoundsTest, OnlyAllowedPeersGetIn) {
  TcpStoreServer::Options options;
  options.allowed_peers = {"10.255.255.1"};
  auto store = StartStore(options);
  RawConn stranger(store->port());
  EXPECT_TRUE(stranger.Closed(absl::Seconds(2)));
  EXPECT_EQ(store->counters().refused_peer, 1u);
  EXPECT_EQ(store->connections_open(), 0);

  options.allowed_peers = {"127.0.0.1"};
  auto open_store = StartStore(options);
  RawConn engine(open_store->port());
  engine.Validate();
  engine.Send("\x0d" + std::string(4, '\x03'));
  EXPECT_EQ(engine.Read(4), std::string(4, '\x03'));
}

TEST(StoreBoundsTest, AConnectionTheAdmitHookRefusesClosesBeforeAByteIsRead) {
  TcpStoreServer::Options options;
  std::vector<SocketEnds> asked;
  options.admit = [&asked](const SocketEnds& ends) {
    asked.push_back(ends);
    return asked.size() == 1 ? absl::PermissionDeniedError("not an engine's process")
                             : absl::OkStatus();
  };
  auto store = StartStore(options);
  ASSERT_TRUE(store->Set("/broadcast_from/0/0", "id").ok());
  RawConn stranger(store->port());
  // The store closes a refused connection at once, so the stranger's frames may meet a closed
  // socket (EPIPE): sent or not, the connection ends and nothing of it is read.
  stranger.TrySend(Hex("00 ce f7 85 3c") + "\x03" + Str("/broadcast_from/0/0"));
  EXPECT_TRUE(stranger.Closed(absl::Seconds(2)));
  EXPECT_EQ(store->counters().refused_admit, 1u);
  EXPECT_EQ(store->LastRefusal(), "not an engine's process");
  EXPECT_EQ(store->InitCount(), 0);

  RawConn rank(store->port());
  rank.Validate();
  rank.Send("\x04" + Str("init/") + U64(1));
  EXPECT_EQ(rank.Read(8), U64(1));
  rank.Send("\x03" + Str("/broadcast_from/0/0"));
  EXPECT_EQ(rank.Read(10), Str("id"));
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[1].peer_ip, "127.0.0.1");
  EXPECT_EQ(asked[1].local_port, store->port());
}

// WAITs on thousands of (repeated) keys must not make every later SET re-check them all: a
// waiter is indexed by the keys it still misses, so a SET costs only its own waiters.
TEST(StoreBoundsTest, ManyLongWaitsDoNotMakeEachSetSlow) {
  auto store = StartStore();
  const StoreLimits limits;
  const std::string present(900, 'p');
  ASSERT_TRUE(store->Set(present, "x").ok());
  std::vector<RawConn> waiters(11);
  for (size_t w = 0; w < waiters.size(); ++w) {
    waiters[w] = RawConn(store->port());
    waiters[w].Validate();
    std::string frame = "\x06" + U64(limits.max_keys_per_request);
    for (uint64_t i = 0; i + 1 < limits.max_keys_per_request; ++i) frame += Str(present);
    frame += Str(absl::StrCat("/missing/", w));
    waiters[w].Send(frame);
  }
  RawConn setter(store->port());
  setter.Validate();
  std::string sets;
  for (int i = 0; i < 1500; ++i) sets += "\x01" + Str(absl::StrCat("/s", i)) + Str("v");
  setter.Send(sets);
  RawConn rank(store->port());  // what a torch rank does once a second meanwhile
  rank.Validate();
  const absl::Time start = absl::Now();
  rank.Send("\x05" + U64(1) + Str("/exception_dump"));
  EXPECT_EQ(rank.Read(1, absl::Seconds(30)), Hex("01"));
  // The old server re-checked 11 x 4,096 keys per SET: about 15 s for these 1,500.
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  ASSERT_TRUE(store->Set("/missing/3", "1").ok());
  EXPECT_EQ(waiters[3].Read(1), Hex("00"));
  EXPECT_EQ(waiters[4].Read(1, absl::Milliseconds(100)).substr(0, 1), "<");
}

TEST(StoreBoundsTest, RegistrationIsOneAddOfOnePerConnectionUpToTheEngineRanks) {
  TcpStoreServer::Options options;
  options.max_registered = 2;
  auto store = StartStore(options);
  auto registered = [&](int64_t delta) {
    auto c = std::make_unique<RawConn>(store->port());
    c->Validate();
    c->Send("\x04" + Str("init/") + U64(static_cast<uint64_t>(delta)));
    return c;
  };
  EXPECT_TRUE(registered(0)->Closed());  // would hold a slot as a "rank" without counting
  EXPECT_TRUE(registered(5)->Closed());  // would count as five ranks
  auto a = registered(1);
  EXPECT_EQ(a->Read(8), U64(1));
  a->Send("\x04" + Str("init/") + U64(1));  // twice from one connection
  EXPECT_TRUE(a->Closed());
  auto b = registered(1);
  auto c = registered(1);
  EXPECT_EQ(b->Read(8), U64(2));
  EXPECT_EQ(c->Read(8), U64(3));
  EXPECT_EQ(store->RegisteredOpen(), 2u);
  EXPECT_TRUE(registered(1)->Closed());  // a third rank in a group of two
  c.reset();                             // a rank leaves: its engine restarts and registers again
  ASSERT_TRUE(Eventually([&] { return store->RegisteredOpen() == 1; }));
  auto again = registered(1);
  EXPECT_EQ(again->Read(8), U64(4));
  EXPECT_EQ(store->RegisteredOpen(), 2u);
}

TEST(StoreBoundsTest, ClientsCannotChangeWhatTheDaemonPublished) {
  auto store = StartStore();
  const std::string id_key = "/g/g//cuda//0";
  ASSERT_TRUE(store->Set(id_key, std::string(128, 'i')).ok());
  for (const std::string& frame :
       {"\x01" + Str(id_key) + Str("forged"), "\x09" + Str(id_key) + Str("x"), "\x08" + Str(id_key),
        "\x02" + Str(id_key) + Str(std::string(128, 'i')) + Str("y"),
        "\x0b" + U64(1) + Str(id_key) + Str("z")}) {
    RawConn c(store->port());
    c.Validate();
    c.Send(frame);
    EXPECT_TRUE(c.Closed());
  }
  EXPECT_EQ(*store->Get(id_key), std::string(128, 'i'));
  // Nor read it before they register as a rank.
  RawConn stranger(store->port());
  stranger.Validate();
  stranger.Send("\x03" + Str(id_key));
  EXPECT_TRUE(stranger.Closed());
  RawConn reader(store->port());
  reader.Validate();
  Register(reader);
  reader.Send("\x03" + Str(id_key));
  EXPECT_EQ(reader.Read(8 + 128), Str(std::string(128, 'i')));
}

TEST(StoreBoundsTest, AMultiSetThatDoesNotFitChangesNothingAndOneThatFitsWakesWaiters) {
  TcpStoreServer::Options options;
  options.limits.max_data_bytes = 4096;
  auto store = StartStore(options);
  RawConn waiter(store->port());
  waiter.Validate();
  waiter.Send("\x06" + U64(1) + Str("/victim"));
  RawConn setter(store->port());
  setter.Validate();
  setter.Send("\x0b" + U64(2) + Str("/victim") + Str("v") + Str("/big") +
              Str(std::string(5000, 'b')));
  EXPECT_TRUE(setter.Closed());
  EXPECT_FALSE(store->Get("/victim").has_value());
  RawConn second(store->port());
  second.Validate();
  second.Send("\x0b" + U64(2) + Str("/victim") + Str("v") + Str("/small") + Str("s"));
  EXPECT_EQ(waiter.Read(1), Hex("00"));
}

// Out of descriptors, a listener with a pending connection is readable forever; accept must not
// spin on EMFILE. Run in a child so the descriptor limit and the busy loop stay there.
TEST(StoreBoundsTest, OutOfDescriptorsTheStoreShedsConnectionsWithoutSpinning) {
  int ready[2], port_pipe[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(port_pipe), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto s = TcpStoreServer::Start("127.0.0.1", 0);
    if (!s.ok()) ::_exit(10);
    uint16_t port = (*s)->port();
    (void)!::write(port_pipe[1], &port, sizeof(port));
    std::vector<int> hogs;
    for (int fd; (fd = ::dup(0)) >= 0;) hogs.push_back(fd);
    char c;
    (void)!::read(ready[0], &c, 1);  // the parent connected
    rusage before{}, after{};
    ::getrusage(RUSAGE_SELF, &before);
    absl::SleepFor(absl::Milliseconds(1500));
    ::getrusage(RUSAGE_SELF, &after);
    const double cpu = (after.ru_utime.tv_sec - before.ru_utime.tv_sec) +
                       (after.ru_stime.tv_sec - before.ru_stime.tv_sec) +
                       1e-6 * ((after.ru_utime.tv_usec - before.ru_utime.tv_usec) +
                               (after.ru_stime.tv_usec - before.ru_stime.tv_usec));
    const bool shed = (*s)->counters().refused_no_fds >= 1;
    ::_exit(cpu < 0.5 && shed ? 0 : (shed ? 11 : 12));
  }
  uint16_t port = 0;
  ASSERT_EQ(::read(port_pipe[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  absl::SleepFor(absl::Milliseconds(300));  // the child fills its descriptor table
  std::vector<RawConn> conns;
  for (int i = 0; i < 3; ++i) conns.emplace_back(port);
  (void)!::write(ready[1], "x", 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  // 11: it spun (over 0.5 s of CPU in 1.5 s); 12: it never shed the pending connections.
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (int fd : {ready[0], ready[1], port_pipe[0], port_pipe[1]}) ::close(fd);
}

}  // namespace
}  // namespace wsync
