// What owners hold (owner_holds.hpp): mutable lists per owner, reference counts per (owner,
// block), entries taken and given back, the capacity bound.
#include "kvpool/pool/owner_holds.hpp"

#include <gtest/gtest.h>

#include "formatted_arena.hpp"

namespace kvpool::pool {
namespace {

TEST(OwnerHolds, MutableListsArePerOwner) {
  FormattedArena a(8, 3);
  OwnerHolds h(a.regions());
  h.push_mutable(1, 4);
  h.push_mutable(1, 6);
  h.push_mutable(2, 5);
  const OwnerRecord& o1 = a.regions().owners[1];
  EXPECT_EQ(o1.mutable_count, 2u);
  EXPECT_EQ(o1.mutable_head, 6u);
  EXPECT_EQ(a.block(4).owner, 1u);
  EXPECT_EQ(a.block(4).state, static_cast<uint8_t>(BlockStateCode::kMutable));
  h.remove_mutable(1, 6);
  EXPECT_EQ(o1.mutable_head, 4u);
  EXPECT_EQ(o1.mutable_count, 1u);
  EXPECT_EQ(a.regions().owners[2].mutable_count, 1u);
  EXPECT_EQ(a.header().stats.mutable_blocks.load(), 2u);
}

TEST(OwnerHolds, ReferencesCountPerOwnerAndBlock) {
  FormattedArena a(8, 3);
  OwnerHolds h(a.regions());
  const uint32_t free_before = h.free_entries();
  ASSERT_TRUE(h.add(0, 3));
  ASSERT_TRUE(h.add(0, 3));
  ASSERT_TRUE(h.add(2, 3));
  EXPECT_EQ(h.count(0, 3), 2u);
  EXPECT_EQ(h.count(2, 3), 1u);
  EXPECT_EQ(h.count(1, 3), 0u);
  EXPECT_EQ(h.free_entries(), free_before - 2);  // one entry per (owner, block) pair
  EXPECT_EQ(a.regions().owners[0].hold_refs, 2u);
  EXPECT_TRUE(h.drop(0, 3));
  EXPECT_EQ(h.count(0, 3), 1u);
  EXPECT_FALSE(h.drop(1, 3));  // holds none
  EXPECT_EQ(h.drop_all(2, 3), 1u);
  EXPECT_EQ(h.drop_all(0, 3), 1u);
  EXPECT_EQ(h.free_entries(), free_before);
  EXPECT_EQ(a.regions().owners[0].hold_head, kNone);
  EXPECT_EQ(a.regions().owners[0].hold_refs, 0u);
}

TEST(OwnerHolds, AddFailsWithoutChangeWhenNoEntryIsLeft) {
  FormattedArena a(8, 2, /*holds=*/2);
  OwnerHolds h(a.regions());
  ASSERT_TRUE(h.add(0, 1));
  ASSERT_TRUE(h.add(0, 2));
  EXPECT_EQ(h.free_entries(), 0u);
  EXPECT_TRUE(h.add(0, 2));  // an existing pair needs no entry
  EXPECT_FALSE(h.add(1, 1));
  EXPECT_EQ(h.count(1, 1), 0u);
  EXPECT_EQ(a.regions().owners[1].hold_refs, 0u);
}

}  // namespace
}  // namespace kvpool::pool
