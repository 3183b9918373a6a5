// Byte-exact tests of the TCPStore server against the frames in docs/engines/tcpstore.md.

#include "daemon/rendezvous/tcp_store_server.h"

#include <sys/socket.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net.h"
#include "gtest/gtest.h"
#include "tests/rendezvous/store_wire.h"
#include "tests/sim/tcp_store_client.h"

namespace wsync {
namespace {

class TcpStoreServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = TcpStoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(TcpStoreServerTest, HandshakeAndIdFetchMatchTheTorchWireTrace) {
  const std::string key = "/weight_sync/weight_sync//cuda//0";
  const std::string id(128, '\x5a');
  RawConn c(server_->port());
  c.Validate();                   // row 1: no reply
  c.Send(Hex("0d 39 30 00 00"));  // row 2: PING pid 12345
  EXPECT_EQ(c.Read(4), Hex("39 30 00 00"));
  c.Send(Hex("04 05 00 00 00 00 00 00 00 69 6e 69 74 2f 01 00 00 00 00 00 00 00"));  // row 3
  EXPECT_EQ(c.Read(8), U64(1));
  EXPECT_EQ(server_->InitCount(), 1);
  // row 4: WAIT before the id exists; the reply comes once the daemon publishes it.
  c.Send(Hex("06 01 00 00 00 00 00 00 00 21 00 00 00 00 00 00 00") + key);
  EXPECT_EQ(c.Read(1, absl::Milliseconds(200)).substr(0, 1), "<");
  ASSERT_TRUE(server_->Set(key, id).ok());
  EXPECT_EQ(c.Read(1), Hex("00"));
  c.Send(Hex("03 21 00 00 00 00 00 00 00") + key);  // row 5: GET
  EXPECT_EQ(c.Read(8 + 128), Hex("80 00 00 00 00 00 00 00") + id);
  c.Send(Hex("05 01 00 00 00 00 00 00 00 0f 00 00 00 00 00 00 00") + "/exception_dump");  // row 6
  EXPECT_EQ(c.Read(1), Hex("01"));
  auto fetchers = server_->FetchersOf(key);
  ASSERT_EQ(fetchers.size(), 1u);
  EXPECT_EQ(fetchers[0], 12345u);
  EXPECT_EQ(server_->ConnectedPids(), std::vector<uint32_t>{12345});
}

TEST_F(TcpStoreServerTest, EveryCommandAnswersAsTorchDoes) {
  RawConn c(server_->port());
  c.Validate();
  c.Send("\x01" + Str("/k") + Str("v1"));  // SET: no reply
  c.Send("\x03" + Str("/k"));              // GET
  EXPECT_EQ(c.Read(10), Str("v1"));
  c.Send("\x03" + Str("/missing"));  // GET missing: empty bytes (libuv)
  EXPECT_EQ(c.Read(8), U64(0));
  // COMPARE_SET, the three verified cases.
  c.Send("\x02" + Str("/cs") + Str("") + Str("A"));
  EXPECT_EQ(c.Read(9), Str("A"));
  c.Send("\x02" + Str("/cs") + Str("A") + Str("B"));
  EXPECT_EQ(c.Read(9), Str("B"));
  c.Send("\x02" + Str("/cs") + Str("Z") + Str("C"));
  EXPECT_EQ(c.Read(9), Str("B"));
  c.Send("\x02" + Str("/none") + Str("X") + Str("Y"));  // missing key, non-empty expected
  EXPECT_EQ(c.Read(9), Str("X"));
  // ADD stores decimal text.
  c.Send("\x04" + Str("/n") + U64(5));
  EXPECT_EQ(c.Read(8), U64(5));
  c.Send(std::string("\x04", 1) + Str("/n") + U64(static_cast<uint64_t>(-2)));
  EXPECT_EQ(c.Read(8), U64(3));
  c.Send("\x03" + Str("/n"));
  EXPECT_EQ(c.Read(9), Str("3"));
  // CHECK
  c.Send("\x05" + U64(2) + Str("/k") + Str("/n"));
  EXPECT_EQ(c.Read(1), Hex("00"));
  c.Send("\x05" + U64(2) + Str("/k") + Str("/nope"));
  EXPECT_EQ(c.Read(1), Hex("01"));
  // GETNUMKEYS: /k /cs /n
  c.Send("\x07");
  EXPECT_EQ(c.Read(8), U64(3));
  // APPEND creates then extends.
  c.Send("\x09" + Str("/a") + Str("x"));
  c.Send("\x09" + Str("/a") + Str("yz"));
  c.Send("\x03" + Str("/a"));
  EXPECT_EQ(c.Read(11), Str("xyz"));
  // MULTI_SET then MULTI_GET.
  c.Send("\x0b" + U64(2) + Str("/m1") + Str("one") + Str("/m2") + Str("two"));
  c.Send("\x0a" + U64(3) + Str("/m1") + Str("/m2") + Str("/absent"));
  EXPECT_EQ(c.Read(11 + 11 + 8), Str("one") + Str("two") + U64(0));
  // DELETE_KEY
  c.Send("\x08" + Str("/m1"));
  EXPECT_EQ(c.Read(8), U64(1));
  c.Send("\x08" + Str("/m1"));
  EXPECT_EQ(c.Read(8), U64(0));
  // WAIT that is satisfied at once.
  c.Send("\x06" + U64(1) + Str("/k"));
  EXPECT_EQ(c.Read(1), Hex("00"));
  // WAIT then CANCEL_WAIT (a torch client's timeout path); the connection stays usable.
  c.Send("\x06" + U64(1) + Str("/later"));
  EXPECT_EQ(c.Read(1, absl::Milliseconds(100)).substr(0, 1), "<");
  c.Send("\x0c");
  EXPECT_EQ(c.Read(1), Hex("01"));
  ASSERT_TRUE(server_->Set("/later", "x").ok());  // must not produce a stray STOP_WAITING
  c.Send("\x0d" + std::string("\x01\x02\x03\x04", 4));
  EXPECT_EQ(c.Read(4), std::string("\x01\x02\x03\x04", 4));
}

TEST_F(TcpStoreServerTest, SetFromAnotherConnectionWakesAWaiter) {
  RawConn waiter(server_->port());
  RawConn setter(server_->port());
  waiter.Validate();
  setter.Validate();
  waiter.Send("\x06" + U64(2) + Str("/a") + Str("/b"));
  setter.Send("\x01" + Str("/a") + Str("1"));
  EXPECT_EQ(waiter.Read(1, absl::Milliseconds(200)).substr(0, 1), "<");  // /b still missing
  setter.Send("\x04" + Str("/b") + U64(1));                              // ADD also wakes
  EXPECT_EQ(setter.Read(8), U64(1));
  EXPECT_EQ(waiter.Read(1), Hex("00"));
}

TEST_F(TcpStoreServerTest, RequestsSplitAcrossBytesAndMergedInOneWriteBothWork) {
  RawConn c(server_->port());
  c.SendBytewise(Hex("00 ce f7 85 3c") + "\x01" + Str("/k") + Str("value") + "\x03" + Str("/k"));
  EXPECT_EQ(c.Read(13), Str("value"));
  c.Send("\x01" + Str("/x") + Str("1") + "\x01" + Str("/y") + Str("2") + "\x0a" + U64(2) +
         Str("/x") + Str("/y"));
  EXPECT_EQ(c.Read(18), Str("1") + Str("2"));
}

TEST_F(TcpStoreServerTest, ProtocolViolationsCloseTheConnectionAndTheServerSurvives) {
  {
    RawConn c(server_->port());
    c.Send("\x0d\x01\x00\x00\x00");  // PING before VALIDATE
    EXPECT_TRUE(c.Closed());
  }
  {
    RawConn c(server_->port());
    c.Send(Hex("00 de ad be ef"));  // bad magic
    EXPECT_TRUE(c.Closed());
  }
  {
    RawConn c(server_->port());
    c.Validate();
    c.Validate();  // second VALIDATE
    EXPECT_TRUE(c.Closed());
  }
  {
    RawConn c(server_->port());
    c.Validate();
    c.Send("\x0e" + Str("/q") + Str("v"));  // queue commands are not served
    EXPECT_TRUE(c.Closed());
  }
  {
    RawConn c(server_->port());
    c.Validate();
    c.Send("\x03" + U64(StoreLimits{}.max_key_bytes + 1));  // oversize key
    EXPECT_TRUE(c.Closed());
  }
  {
    RawConn c(server_->port());
    c.Validate();
    c.Send("\x06" + U64(1) + Str("/never"));
  }  // client dies during a WAIT
  RawConn ok(server_->port());
  ok.Validate();
  ok.Send("\x0d" + std::string(4, '\x07'));
  EXPECT_EQ(ok.Read(4), std::string(4, '\x07'));
}

TEST_F(TcpStoreServerTest, LargeValuesRoundTripAndErasePrefixDropsAGroupsKeys) {
  RawConn c(server_->port());
  c.Validate();
  std::string big(StoreLimits{}.max_value_bytes, 'q');
  c.Send("\x01" + Str("/G/big") + Str(big));
  c.Send("\x03" + Str("/G/big"));
  EXPECT_EQ(c.Read(8 + big.size(), absl::Seconds(20)), Str(big));
  ASSERT_TRUE(server_->Set("/G/G//cuda//0", "id").ok());
  ASSERT_TRUE(server_->Set("/H/keep", "x").ok());
  EXPECT_EQ(server_->ErasePrefix("/G/"), 2u);
  EXPECT_FALSE(server_->Get("/G/G//cuda//0").has_value());
  EXPECT_TRUE(server_->Get("/H/keep").has_value());
}

TEST_F(TcpStoreServerTest, SimulatorClientRegistersLikeTorch) {
  auto client =
      TcpStoreClient::Connect("127.0.0.1", server_->port(), 4242, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(server_->InitCount(), 1);
  EXPECT_EQ((*client)->Wait({"/nothing"}, absl::Milliseconds(100)).code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE((*client)->Set("/after", "ok").ok());  // still usable after the cancel
  EXPECT_EQ(*(*client)->Get("/after"), "ok");
}

}  // namespace
}  // namespace wsync
