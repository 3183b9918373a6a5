// Who may be an engine rank in a store whose keys name no group (vLLM's): judged by the process
// behind each connection, read from the real /proc. An "engine" is a forked child serving a port,
// its "worker" a grandchild holding a store connection; the test process, the engine's parent,
// is a stranger to it.

#include "daemon/transport/broadcast/store_rank_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net.h"
#include "daemon/transport/engine_process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

// Accepts the next connection on `listener` (a blocking socket), within 5 s.
UniqueFd AcceptOne(int listener) {
  for (const absl::Time until = absl::Now() + absl::Seconds(5); absl::Now() < until;) {
    UniqueFd fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd.valid()) return fd;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return UniqueFd();
}

// A forked engine: its own process group, serving a loopback port, with a worker child that
// connects to `store_port`. Killed with its worker at destruction.
class ForkedEngine {
 public:
  explicit ForkedEngine(uint16_t store_port) {
    int ports[2], joined[2];
    if (::pipe(ports) != 0 || ::pipe(joined) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only system calls from here on: the parent has threads.
      ::setpgid(0, 0);
      const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t length = sizeof(address);
      if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
          ::listen(listener, 8) != 0 ||
          ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        ::_exit(1);
      }
      const uint16_t port = ntohs(address.sin_port);
      if (::fork() == 0) {
        const int store = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        to.sin_port = htons(store_port);
        const char ok = ::connect(store, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0;
        (void)!::write(joined[1], &ok, 1);
        for (;;) ::pause();
      }
      (void)!::write(ports[1], &port, sizeof(port));
      for (;;) ::pause();
    }
    ::close(ports[1]);
    ::close(joined[1]);
    char ok = 0;
    if (::read(ports[0], &port_, sizeof(port_)) != sizeof(port_)) port_ = 0;
    if (::read(joined[0], &ok, 1) != 1 || ok == 0) port_ = 0;
    ::close(ports[0]);
    ::close(joined[0]);
  }
  ~ForkedEngine() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  bool ready() const { return pid_ > 0 && port_ != 0; }

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

class StoreRankGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto listener = ListenTcp("127.0.0.1", 0);
    ASSERT_TRUE(listener.ok()) << listener.status();
    store_ = std::move(*listener);
    auto port = LocalPort(store_.get());
    ASSERT_TRUE(port.ok());
    store_port_ = *port;
  }
  SocketEnds EndsOf(const UniqueFd& accepted) {
    auto ends = SocketEndsOf(accepted.get());
    EXPECT_TRUE(ends.ok()) << ends.status();
    return ends.ok() ? *ends : SocketEnds{};
  }

  UniqueFd store_;
  uint16_t store_port_ = 0;
};

TEST_F(StoreRankGateTest, TheEnginesWorkerIsAdmittedAndItsParentIsNot) {
  ForkedEngine engine(store_port_);
  ASSERT_TRUE(engine.ready());
  const UniqueFd worker = AcceptOne(store_.get());
  ASSERT_TRUE(worker.valid());
  StoreRankGate gate({"127.0.0.1"}, {engine.url()});
  gate.Refresh();
  EXPECT_TRUE(gate.Admit(EndsOf(worker)).ok()) << gate.Admit(EndsOf(worker));

  // The test process started the engine, but is not the engine or a descendant of it.
  auto mine = ConnectTcp("127.0.0.1", store_port_, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(mine.ok());
  const UniqueFd stranger = AcceptOne(store_.get());
  ASSERT_TRUE(stranger.valid());
  const absl::Status refused = gate.Admit(EndsOf(stranger));
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("(uid ", ::getuid(),
                                                        ") is no engine rank: "
                                                        "engine ",
                                                        engine.url())));
  EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("served by pid ", engine.pid())));
  EXPECT_THAT(refused.message(), HasSubstr("neither its server nor a descendant holds the socket"));
  EXPECT_THAT(refused.message(), HasSubstr("--vllm-rendezvous unique-id"));
}

TEST_F(StoreRankGateTest, ALocalConnectionIsRefusedWhenTheEnginesProcessIsNotFound) {
  // Nothing listens on the engine's port: wsyncd cannot tell its processes.
  auto idle = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(idle.ok());
  const std::string url = absl::StrCat("http://127.0.0.1:", *LocalPort(idle->get()));
  idle->reset();
  StoreRankGate gate({"127.0.0.1"}, {url});
  gate.Refresh();
  auto mine = ConnectTcp("127.0.0.1", store_port_, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(mine.ok());
  const UniqueFd accepted = AcceptOne(store_.get());
  ASSERT_TRUE(accepted.valid());
  const absl::Status refused = gate.Admit(EndsOf(accepted));
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("engine ", url, ": no socket listens")));
}

TEST_F(StoreRankGateTest, AConnectionFromAnotherHostIsLeftToTheAddressCheck) {
  StoreRankGate gate({"127.0.0.1", "10.1.2.3"}, {});
  gate.Refresh();
  SocketEnds remote{"10.1.2.3", store_port_, "10.9.8.7", 40000};
  EXPECT_TRUE(gate.Admit(remote).ok());
  // From one of this host's addresses, with no local engine, nobody is a rank.
  SocketEnds local{"10.1.2.3", store_port_, "10.1.2.3", 40000};
  EXPECT_THAT(gate.Admit(local).message(), HasSubstr("is no engine rank"));
}

TEST(EngineProcess, AConnectedSocketIsFoundByItsEndsWithItsUserAndHolder) {
  auto listener = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  const uint16_t port = *LocalPort(listener->get());
  auto client = ConnectTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(client.ok());
  const UniqueFd accepted = AcceptOne(listener->get());
  ASSERT_TRUE(accepted.valid());
  auto ends = SocketEndsOf(accepted.get());
  ASSERT_TRUE(ends.ok());
  EXPECT_EQ(ends->local_port, port);
  // The client's end: its own address is the accepted socket's peer.
  auto row = FindTcpSocket(ends->peer_ip, ends->peer_port, ends->local_ip, ends->local_port);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->uid, ::getuid());
  EXPECT_NE(row->inode, 0u);
  EXPECT_TRUE(HoldsSocket(::getpid(), row->inode));
  EXPECT_FALSE(HoldsSocket(::getppid(), row->inode));
  EXPECT_EQ(FindTcpSocket(ends->peer_ip, ends->peer_port, ends->local_ip, 1).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(EngineProcess, AProcessTreeHoldsTheRootsAndTheirDescendantsOnly) {
  const pid_t child = ::fork();
  if (child == 0) {
    for (;;) ::pause();
  }
  ASSERT_GT(child, 0);
  const std::vector<pid_t> mine = ProcessTree({::getpid()});
  const std::vector<pid_t> its = ProcessTree({child});
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(mine.front(), ::getpid());
  EXPECT_NE(std::find(mine.begin(), mine.end(), child), mine.end());
  EXPECT_EQ(its, std::vector<pid_t>{child});
  EXPECT_TRUE(ProcessTree({0x7ffffff0}).empty()) << "a root that does not exist is left out";
}

}  // namespace
}  // namespace wsync
