// The receiving side of the host collective as a daemon uses it (the node relay's downstream):
// root broadcasts out of one daemon's slot land in another daemon's slot, piece by piece.
#include "common/host/host_peer_communicator.h"

#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/host/host_platform.h"
#include "common/host/shm_slot.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

using ::testing::HasSubstr;

absl::Time Soon() { return absl::Now() + absl::Seconds(5); }

void Fill(SlotMemory& slot, uint8_t seed) {
  auto* p = static_cast<uint8_t*>(slot.data());
  for (uint64_t i = 0; i < slot.bytes(); ++i) p[i] = static_cast<uint8_t>(i * 31 + seed);
}

TEST(HostPeerCommunicator, PiecesBroadcastByTheRootLandAtTheirOffsetsInThePeersSlot) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  auto root = platform.CreateRootCommunicator(0, 3, "");
  ASSERT_TRUE(root.ok()) << root.status();
  auto sent = platform.AllocateSlot(0, 1 << 20);
  auto first = platform.AllocateSlot(1, 1 << 20);
  auto second = platform.AllocateSlot(2, 1 << 20);
  ASSERT_TRUE(sent.ok() && first.ok() && second.ok());
  Fill(**sent, 7);
  std::memset((*first)->data(), 0, (*first)->bytes());
  std::memset((*second)->data(), 0, (*second)->bytes());
  // A bf16 tensor and a float32 one, out of order in the slot, and a byte range.
  const std::vector<BroadcastPiece> pieces = {
      {4096, 1000, DType::kBfloat16}, {0, 512, DType::kFloat32}, {600000, 3, DType::kUint8}};
  std::vector<absl::Status> received(2);
  std::vector<std::thread> peers;
  for (int rank = 1; rank <= 2; ++rank) {
    peers.emplace_back([&, rank] {
      SlotMemory& into = rank == 1 ? **first : **second;
      auto peer = platform.JoinCommunicator(rank, (*root)->unique_id(), rank, 3, "", Soon());
      if (!peer.ok()) {
        received[rank - 1] = peer.status();
        return;
      }
      EXPECT_EQ((*peer)->rank(), rank);
      EXPECT_EQ((*peer)->world_size(), 3);
      received[rank - 1] = (*peer)->ReceiveInto(into, pieces, Soon());
    });
  }
  auto ticket = (*root)->StartBroadcast(**sent, pieces, Soon());
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  ASSERT_TRUE((*root)->WaitBroadcast(*ticket, Soon()).ok());
  for (auto& t : peers) t.join();
  for (const absl::Status& s : received) ASSERT_TRUE(s.ok()) << s;
  const auto* want = static_cast<const uint8_t*>((*sent)->data());
  for (SlotMemory* got : {first->get(), second->get()}) {
    const auto* bytes = static_cast<const uint8_t*>(got->data());
    for (const BroadcastPiece& p : pieces) {
      EXPECT_EQ(std::memcmp(bytes + p.offset, want + p.offset, p.bytes()), 0) << p.offset;
    }
    // Nothing outside the pieces was written.
    EXPECT_EQ(bytes[2048], 0);
    EXPECT_EQ(bytes[600003], 0);
  }
}

TEST(HostPeerCommunicator, PiecesOutsideTheSlotAreRefusedWithNothingReceived) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  auto root = platform.CreateRootCommunicator(0, 2, "");
  ASSERT_TRUE(root.ok());
  auto sent = platform.AllocateSlot(0, 1 << 20);
  auto small = platform.AllocateSlot(1, 4096);
  ASSERT_TRUE(sent.ok() && small.ok());
  Fill(**sent, 3);
  absl::StatusOr<std::unique_ptr<PeerCommunicator>> peer;
  std::thread join(
      [&] { peer = platform.JoinCommunicator(1, (*root)->unique_id(), 1, 2, "", Soon()); });
  auto ticket = (*root)->StartBroadcast(**sent, {{0, 100, DType::kUint8}}, Soon());
  ASSERT_TRUE(ticket.ok());
  join.join();
  ASSERT_TRUE(peer.ok()) << peer.status();
  absl::Status refused = (*peer)->ReceiveInto(**small, {{4000, 200, DType::kUint8}}, Soon());
  EXPECT_EQ(refused.code(), absl::StatusCode::kOutOfRange) << refused;
  // A count whose byte size wraps 64 bits is no smaller for it.
  refused = (*peer)->ReceiveInto(**small, {{0, (uint64_t{1} << 63) + 1, DType::kFloat32}}, Soon());
  EXPECT_EQ(refused.code(), absl::StatusCode::kOutOfRange) << refused;
  // The refused call read nothing: the root's broadcast is still there for the next receive.
  std::memset((*small)->data(), 0, 4096);
  ASSERT_TRUE((*peer)->ReceiveInto(**small, {{0, 100, DType::kUint8}}, Soon()).ok());
  EXPECT_EQ(std::memcmp((*small)->data(), (*sent)->data(), 100), 0);
  EXPECT_TRUE((*root)->WaitBroadcast(*ticket, Soon()).ok());
}

// A root of world 2 and its peer joined, with a slot of the peer's.
struct Joined {
  HostPlatform platform{"127.0.0.1", "127.0.0.1"};
  std::unique_ptr<RootCommunicator> root;
  std::unique_ptr<SlotMemory> slot;
  std::unique_ptr<PeerCommunicator> peer;
};

void Join(Joined& j) {
  auto root = j.platform.CreateRootCommunicator(0, 2, "");
  ASSERT_TRUE(root.ok()) << root.status();
  j.root = std::move(*root);
  auto slot = j.platform.AllocateSlot(1, 1 << 20);
  ASSERT_TRUE(slot.ok()) << slot.status();
  j.slot = std::move(*slot);
  auto peer = j.platform.JoinCommunicator(1, j.root->unique_id(), 1, 2, "", Soon());
  ASSERT_TRUE(peer.ok()) << peer.status();
  j.peer = std::move(*peer);
}

TEST(HostPeerCommunicator, AReceiveNobodySendsEndsAtItsDeadlineNamingThePiece) {
  Joined j;
  Join(j);
  if (HasFatalFailure()) return;
  auto& peer = j.peer;
  auto& slot = j.slot;
  const absl::Time start = absl::Now();
  absl::Status s = peer->ReceiveInto(*slot, {{0, 64, DType::kUint8}, {64, 64, DType::kUint8}},
                                     absl::Now() + absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr("piece 0 of 2"));
  // The communicator is broken for good: a later receive says so at once.
  absl::Status later = peer->ReceiveInto(*slot, {{0, 64, DType::kUint8}}, Soon());
  EXPECT_FALSE(later.ok());
}

TEST(HostPeerCommunicator, AnAbortFromAnotherThreadEndsAWaitingReceive) {
  Joined j;
  Join(j);
  if (HasFatalFailure()) return;
  auto& peer = j.peer;
  auto& slot = j.slot;
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    peer->Abort("the upstream left");
  });
  const absl::Time start = absl::Now();
  absl::Status s =
      peer->ReceiveInto(*slot, {{0, 64, DType::kUint8}}, absl::Now() + absl::Seconds(20));
  aborter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("the upstream left"));
}

TEST(HostPeerCommunicator, RanksOutsideTheWorldAndBadIdsAreRefused) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  auto root = platform.CreateRootCommunicator(0, 2, "");
  ASSERT_TRUE(root.ok());
  for (int rank : {0, 2, -1}) {
    auto peer = platform.JoinCommunicator(1, (*root)->unique_id(), rank, 2, "", Soon());
    EXPECT_EQ(peer.status().code(), absl::StatusCode::kInvalidArgument) << rank;
  }
  auto bad = platform.JoinCommunicator(1, std::string(128, 'x'), 1, 2, "", Soon());
  EXPECT_FALSE(bad.ok());
  auto device =
      platform.JoinCommunicator(HostPlatform::kDevices, (*root)->unique_id(), 1, 2, "", Soon());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace wsync
