#include "common/host/host_collective.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/host/shm_slot.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

TEST(HostCollectiveId, EncodesTo128BytesAndBack) {
  HostCollectiveId id{"127.0.0.1", 4321, std::string(16, '\x11')};
  std::string bytes = id.Encode();
  ASSERT_EQ(bytes.size(), 128u);
  auto back = HostCollectiveId::Decode(bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->address, "127.0.0.1");
  EXPECT_EQ(back->port, 4321);
  EXPECT_FALSE(HostCollectiveId::Decode(std::string(128, '\0')).ok());
  EXPECT_FALSE(HostCollectiveId::Decode("short").ok());
}

TEST(HostCollective, BroadcastsSlotBytesToEveryRankInOrder) {
  auto root = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 3);
  ASSERT_TRUE(root.ok()) << root.status();
  auto slot = ShmSlot::Create(0, 1 << 20);
  ASSERT_TRUE(slot.ok());
  auto* bytes = static_cast<uint8_t*>((*slot)->data());
  std::vector<std::vector<uint8_t>> got(2, std::vector<uint8_t>(2 * 300000));
  std::vector<absl::Status> results(2);
  std::vector<std::thread> peers;
  const std::string id = (*root)->unique_id();
  for (int r = 1; r <= 2; ++r) {
    peers.emplace_back([&, r] {
      auto peer = HostCollectivePeer::Join(id, r, 3, absl::Now() + absl::Seconds(5));
      if (!peer.ok()) {
        results[r - 1] = peer.status();
        return;
      }
      results[r - 1] = (*peer)->Receive(got[r - 1].data(), 300000, absl::Now() + absl::Seconds(5));
      if (results[r - 1].ok()) {
        results[r - 1] =
            (*peer)->Receive(got[r - 1].data() + 300000, 300000, absl::Now() + absl::Seconds(5));
      }
    });
  }
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 300000; ++i) bytes[i] = static_cast<uint8_t>((7 * i + round) % 256);
    ASSERT_TRUE((*root)->Broadcast(**slot, 0, 300000, absl::Now() + absl::Seconds(5)).ok());
  }
  for (auto& t : peers) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r];
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < 300000; i += 997) {
        ASSERT_EQ(got[r][round * 300000 + i], (7 * i + round) % 256) << "rank " << r + 1;
      }
    }
  }
}

TEST(HostCollective, QueuedTicketsGoOutInOrderOnePiecePerCollective) {
  auto root = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 2);
  ASSERT_TRUE(root.ok()) << root.status();
  auto slot = ShmSlot::Create(0, 1 << 20);
  ASSERT_TRUE(slot.ok());
  auto* bytes = static_cast<uint8_t*>((*slot)->data());
  for (int i = 0; i < (1 << 20); ++i) bytes[i] = static_cast<uint8_t>(i * 13 + 1);
  // Three pieces in the first ticket (as per-tensor buckets send), one in the second; the peer
  // posts one receive per piece, in order, with each piece's own size.
  const std::vector<uint64_t> sizes = {1000, 8, 4096, 70000};
  std::vector<std::vector<uint8_t>> got;
  absl::Status peer_status;
  std::thread peer([&] {
    auto p = HostCollectivePeer::Join((*root)->unique_id(), 1, 2, absl::Now() + absl::Seconds(5));
    if (!p.ok()) {
      peer_status = p.status();
      return;
    }
    for (uint64_t n : sizes) {
      got.emplace_back(n);
      peer_status = (*p)->Receive(got.back().data(), n, absl::Now() + absl::Seconds(5));
      if (!peer_status.ok()) return;
    }
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  auto first = (*root)->StartBroadcast(
      **slot, {{0, 500, DType::kInt16}, {1000, 2, DType::kFloat32}, {2000, 4096, DType::kUint8}},
      deadline);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = (*root)->StartBroadcast(**slot, {{100000, 70000, DType::kUint8}}, deadline);
  ASSERT_TRUE(second.ok()) << second.status();
  auto t1 = (*root)->WaitBroadcast(*first, deadline);
  auto t2 = (*root)->WaitBroadcast(*second, deadline);
  peer.join();
  ASSERT_TRUE(peer_status.ok()) << peer_status;
  ASSERT_TRUE(t1.ok()) << t1.status();
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_GE(t1->wire_seconds, 0);
  EXPECT_GE(t2->idle_seconds, 0);
  const std::vector<uint64_t> offsets = {0, 1000, 2000, 100000};
  for (size_t k = 0; k < sizes.size(); ++k) {
    ASSERT_EQ(0, std::memcmp(got[k].data(), bytes + offsets[k], sizes[k])) << "piece " << k;
  }
  EXPECT_EQ((*root)->WaitBroadcast(*second, deadline).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a ticket is waited once";
}

TEST(HostCollective, PieceOutsideTheSlotIsRefusedBeforeAnythingIsQueued) {
  auto root = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 2);
  ASSERT_TRUE(root.ok()) << root.status();
  auto slot = ShmSlot::Create(0, 1 << 16);
  ASSERT_TRUE(slot.ok());
  // No peer joins: a refused range must not wait for one.
  auto ticket = (*root)->StartBroadcast(**slot, {{(1 << 16) - 8, 16, DType::kUint8}},
                                        absl::Now() + absl::Seconds(5));
  EXPECT_EQ(ticket.status().code(), absl::StatusCode::kOutOfRange) << ticket.status();
}

TEST(HostCollective, MissingRanksAreNamedAtTheDeadline) {
  auto root = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 4);
  ASSERT_TRUE(root.ok());
  auto slot = ShmSlot::Create(0, 4096);
  auto peer = HostCollectivePeer::Join((*root)->unique_id(), 2, 4, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(peer.ok());
  const absl::Time t0 = absl::Now();
  absl::Status s = (*root)->Broadcast(**slot, 0, 16, absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("ranks 1,3 of 4 never joined"));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
}

TEST(HostCollective, RefusesStaleTokensDuplicateRanksAndWrongWorlds) {
  auto root = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 2);
  ASSERT_TRUE(root.ok());
  auto other = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 2);
  ASSERT_TRUE(other.ok());
  HostCollectiveId id = *HostCollectiveId::Decode((*root)->unique_id());
  HostCollectiveId stale = *HostCollectiveId::Decode((*other)->unique_id());
  stale.port = id.port;  // right address, token of another group
  EXPECT_EQ(HostCollectivePeer::Join(stale.Encode(), 1, 2, absl::Now() + absl::Seconds(5))
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(
      HostCollectivePeer::Join((*root)->unique_id(), 1, 3, absl::Now() + absl::Seconds(5)).ok());
  auto first = HostCollectivePeer::Join((*root)->unique_id(), 1, 2, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(
      HostCollectivePeer::Join((*root)->unique_id(), 1, 2, absl::Now() + absl::Seconds(5)).ok());
}

TEST(HostCollective, AbortStopsABroadcastThatAPeerDoesNotDrain) {
  auto root = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 2);
  ASSERT_TRUE(root.ok());
  auto slot = ShmSlot::Create(0, 64 << 20);
  auto peer = HostCollectivePeer::Join((*root)->unique_id(), 1, 2, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(peer.ok());  // joins, then never reads: the socket buffers fill up
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    (*root)->Abort("engine failed");
  });
  const absl::Time t0 = absl::Now();
  absl::Status s = (*root)->Broadcast(**slot, 0, 64 << 20, absl::Now() + absl::Seconds(30));
  aborter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(s.message(), HasSubstr("engine failed"));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

TEST(HostCollective, BroadcastDeadlineNamesTheRanksThatDidNotDrain) {
  auto root = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 2);
  ASSERT_TRUE(root.ok());
  auto slot = ShmSlot::Create(0, 64 << 20);
  auto peer = HostCollectivePeer::Join((*root)->unique_id(), 1, 2, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(peer.ok());  // never reads
  const absl::Time t0 = absl::Now();
  absl::Status s = (*root)->Broadcast(**slot, 0, 64 << 20, absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("not received by: rank 1 at "));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

// The sender waits on POLLOUT of full sockets only, never on a timer: a broadcast ends as soon as
// its last byte is written, so a hundred small ones take milliseconds, not a poll timeout each.
TEST(HostCollective, SmallBroadcastsEndWithoutWaitingOnATimer) {
  auto root = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 3);
  ASSERT_TRUE(root.ok());
  auto slot = ShmSlot::Create(0, 1 << 20);
  ASSERT_TRUE(slot.ok());
  constexpr int kRounds = 100;
  constexpr uint64_t kBytes = 4096;
  std::vector<absl::Status> results(2);
  std::vector<std::thread> peers;
  for (int r = 1; r <= 2; ++r) {
    peers.emplace_back([&, r] {
      auto peer =
          HostCollectivePeer::Join((*root)->unique_id(), r, 3, absl::Now() + absl::Seconds(5));
      if (!peer.ok()) {
        results[r - 1] = peer.status();
        return;
      }
      std::vector<char> buf(kBytes);
      for (int i = 0; i < kRounds && results[r - 1].ok(); ++i) {
        results[r - 1] = (*peer)->Receive(buf.data(), kBytes, absl::Now() + absl::Seconds(10));
      }
    });
  }
  ASSERT_TRUE((*root)->Broadcast(**slot, 0, kBytes, absl::Now() + absl::Seconds(10)).ok());
  const absl::Time t0 = absl::Now();
  for (int i = 1; i < kRounds; ++i) {
    ASSERT_TRUE((*root)->Broadcast(**slot, 0, kBytes, absl::Now() + absl::Seconds(10)).ok());
  }
  const absl::Duration took = absl::Now() - t0;
  for (auto& t : peers) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_LT(took, absl::Milliseconds(1500))
      << kRounds - 1 << " broadcasts of " << kBytes << " bytes";
}

// A flattened bucket lands straight in its tensors' storage: one broadcast, scattered in order
// over more pieces than one recvmsg takes (IOV_MAX), empty pieces included.
TEST(HostCollective, ScatteredReceiveFillsThePiecesBackToBack) {
  auto root = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 2);
  ASSERT_TRUE(root.ok());
  auto slot = ShmSlot::Create(0, 1 << 20);
  ASSERT_TRUE(slot.ok());
  auto* bytes = static_cast<uint8_t*>((*slot)->data());
  for (int i = 0; i < (1 << 20); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 5);
  std::vector<std::vector<uint8_t>> pieces;
  uint64_t total = 0;
  for (int i = 0; i < 1500; ++i) {
    const uint64_t n = i % 7 == 0 ? 0 : 1 + (i * 37) % 500;
    pieces.emplace_back(n);
    total += n;
  }
  pieces.emplace_back((1 << 20) - 4096 - total);  // a large last piece: many reads land in it
  total += pieces.back().size();
  std::vector<iovec> iov;
  for (auto& p : pieces) iov.push_back(iovec{p.data(), p.size()});
  absl::Status received;
  std::thread peer([&] {
    auto p = HostCollectivePeer::Join((*root)->unique_id(), 1, 2, absl::Now() + absl::Seconds(5));
    received = p.ok() ? (*p)->ReceiveScattered(iov, absl::Now() + absl::Seconds(10)) : p.status();
  });
  ASSERT_TRUE((*root)->Broadcast(**slot, 4096, total, absl::Now() + absl::Seconds(10)).ok());
  peer.join();
  ASSERT_TRUE(received.ok()) << received;
  uint64_t at = 4096;
  for (size_t k = 0; k < pieces.size(); ++k) {
    // An empty vector's data() may be null, which memcmp may not be given (UBSan).
    if (pieces[k].empty()) continue;
    ASSERT_EQ(0, std::memcmp(pieces[k].data(), bytes + at, pieces[k].size())) << "piece " << k;
    at += pieces[k].size();
  }
}

TEST(HostCollective, ReceiverReportsACountMismatch) {
  auto root = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 2);
  auto slot = ShmSlot::Create(0, 4096);
  std::thread t([&] { (void)(*root)->Broadcast(**slot, 0, 100, absl::Now() + absl::Seconds(5)); });
  auto peer = HostCollectivePeer::Join((*root)->unique_id(), 1, 2, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(peer.ok());
  char buf[200];
  absl::Status s = (*peer)->Receive(buf, 200, absl::Now() + absl::Seconds(5));
  t.join();
  EXPECT_THAT(s.message(),
              HasSubstr("root broadcast 100 bytes but this rank posted a receive of 200"));
}

TEST(HostCollective, ABroadcastOfMemoryATrainerTruncatedIsDataLossNotACrash) {
  // The kernel reads the slot for send(), so a cut slot is EFAULT there, not SIGBUS: the root
  // names the cause and aborts the collective, which its peers saw only part of.
  auto root = HostRootCommunicator::Create("127.0.0.1", "127.0.0.1", 2);
  ASSERT_TRUE(root.ok()) << root.status();
  auto slot = ShmSlot::Create(0, 1 << 20);
  ASSERT_TRUE(slot.ok());
  int fd = ::shm_open((*slot)->memory_handle().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 0), 0);
  ::close(fd);
  absl::Status received;
  std::thread peer_thread([&] {
    auto peer =
        HostCollectivePeer::Join((*root)->unique_id(), 1, 2, absl::Now() + absl::Seconds(5));
    if (!peer.ok()) {
      received = peer.status();
      return;
    }
    std::vector<uint8_t> buf(1 << 20);
    received = (*peer)->Receive(buf.data(), buf.size(), absl::Now() + absl::Seconds(5));
  });
  absl::Status sent = (*root)->Broadcast(**slot, 0, 1 << 20, absl::Now() + absl::Seconds(5));
  peer_thread.join();
  EXPECT_EQ(sent.code(), absl::StatusCode::kDataLoss) << sent;
  EXPECT_THAT(sent.message(), HasSubstr("shrank under wsyncd"));
  EXPECT_FALSE(received.ok());
  EXPECT_EQ((*root)->Broadcast(**slot, 0, 10, absl::Now() + absl::Seconds(1)).code(),
            absl::StatusCode::kAborted);
}

TEST(ShmSlot, ClientMappingSeesTheDaemonsBytes) {
  auto slot = ShmSlot::Create(3, 1 << 16);
  ASSERT_TRUE(slot.ok());
  auto mapped = ShmMappedSlot::Open((*slot)->memory_handle(), 1 << 16);
  ASSERT_TRUE(mapped.ok());
  const char msg[] = "weights";
  ASSERT_TRUE((*mapped)->CopyIn(100, msg, sizeof(msg)).ok());
  EXPECT_EQ(std::memcmp(static_cast<char*>((*slot)->data()) + 100, msg, sizeof(msg)), 0);
  EXPECT_EQ(*(*slot)->Checksum(200), *(*mapped)->Checksum(200));
  EXPECT_EQ((*mapped)->CopyIn((1 << 16) - 2, msg, 4).code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(ShmMappedSlot::Open("/wsync-does-not-exist", 10).ok());
}

}  // namespace
}  // namespace wsync
