#include "daemon/core/source_table.h"

#include "common/host/host_platform.h"
#include "common/host/host_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wsync {
namespace {

TEST(SourceTable, KeepsAMappingWhileItsHandleStaysAndReplacesItWhenItChanges) {
  HostPlatform platform("127.0.0.1", "127.0.0.1");
  SourceTable table(&platform, 0, "t1");
  auto first = HostSourceArena::Create("t1", 4096);
  auto second = HostSourceArena::Create("t1", 4096);
  ASSERT_TRUE(first.ok() && second.ok());
  static_cast<uint8_t*>((*first)->data())[100] = 1;
  static_cast<uint8_t*>((*second)->data())[100] = 2;
  BucketManifest m;
  m.tensors.push_back(TensorEntry{"w", DType::kUint8, {8}, 0, 8});
  auto resolve = [&](const HostSourceArena& arena, bool announce) {
    std::vector<AllocationAnnounce> a;
    if (announce) a.push_back(AllocationAnnounce{1, arena.name(), arena.bytes()});
    return table.Resolve(a, {TensorSourceRef{1, 100}}, m);
  };
  auto p1 = resolve(**first, true);
  ASSERT_TRUE(p1.ok()) << p1.status();
  EXPECT_EQ(*static_cast<const uint8_t*>(p1->pieces[0].src), 1);
  auto p2 = resolve(**first, true);  // the same handle again: the same mapping
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(p2->pieces[0].src, p1->pieces[0].src);
  EXPECT_EQ(table.mapped(), 1u);
  auto p3 = resolve(**second, true);  // id 1 now names another allocation
  ASSERT_TRUE(p3.ok());
  EXPECT_EQ(*static_cast<const uint8_t*>(p3->pieces[0].src), 2);
  // The first mapping stays valid for whoever still holds it.
  EXPECT_EQ(*static_cast<const uint8_t*>(p1->pieces[0].src), 1);
  auto p4 = resolve(**second, false);  // known id, no announcement
  ASSERT_TRUE(p4.ok());
  EXPECT_EQ(p4->pieces[0].src, p3->pieces[0].src);
}

}  // namespace
}  // namespace wsync
