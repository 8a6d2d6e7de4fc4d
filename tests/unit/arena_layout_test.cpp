// The arena's placement (arena_layout.hpp): pinned offsets, so a code change that moved a
// region (a layout change without a version bump) fails here; the header validation that
// every attach and adoption relies on; and the const view of a read-only mapping.
#include "kvpool/pool/arena_layout.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "formatted_arena.hpp"
#include "kvpool/pool/pool_core.hpp"

namespace kvpool::pool {
namespace {

TEST(ArenaLayout, OffsetsArePinnedForAKnownConfig) {
  // 16 blocks, 8 owners, default holds (2 * 16 + 64 = 96): each region 64-byte aligned
  // after the 320-byte header, in arena.hpp's order. Arena version 2's layout.
  auto o = arena_layout(PoolCoreConfig{16, 8, 0});
  ASSERT_TRUE(o) << o.status().to_string();
  EXPECT_EQ(o->max_holds, 96u);
  EXPECT_EQ(o->table_capacity, 32u);
  EXPECT_EQ(o->hold_table_capacity, 256u);
  EXPECT_EQ(o->max_levels, 16u);
  EXPECT_EQ(o->level_table_capacity, 32u);
  EXPECT_EQ(o->blocks, 320u);
  EXPECT_EQ(o->table, 1344u);
  EXPECT_EQ(o->levels, 1856u);
  EXPECT_EQ(o->level_heap, 2112u);
  EXPECT_EQ(o->level_table, 2176u);
  EXPECT_EQ(o->owners, 2688u);
  EXPECT_EQ(o->holds, 2880u);
  EXPECT_EQ(o->hold_table, 5184u);
  EXPECT_EQ(o->checksums, 9280u);
  EXPECT_EQ(o->total, 9408u);
  EXPECT_EQ(*PoolCore::arena_bytes(PoolCoreConfig{16, 8, 0}), 9408u);
}

TEST(ArenaLayout, RefusesSizesOutOfRangeNamingTheField) {
  auto zero = arena_layout(PoolCoreConfig{0, 1, 0});
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("num_blocks"), std::string::npos);
  auto owners = arena_layout(PoolCoreConfig{4, (1u << 20) + 1, 0});
  ASSERT_FALSE(owners);
  EXPECT_NE(owners.status().message().find("max_owners"), std::string::npos);
  auto holds = arena_layout(PoolCoreConfig{4, 1, (1u << 30) + 1});
  ASSERT_FALSE(holds);
  EXPECT_NE(holds.status().message().find("max_holds"), std::string::npos);
}

TEST(ArenaLayout, FormattedArenaValidatesAndEveryListIsEmpty) {
  FormattedArena a(8, 2);
  EXPECT_TRUE(validate_arena(a.mem(), a.bytes()).is_ok());
  const ArenaHeader& h = a.header();
  EXPECT_EQ(h.free_head, kNone);
  EXPECT_EQ(h.free_tail, kNone);
  EXPECT_EQ(h.level_count, 0u);
  EXPECT_EQ(h.registered, 0u);
  EXPECT_EQ(a.regions().owners[1].mutable_head, kNone);
  EXPECT_EQ(a.regions().owners[1].hold_head, kNone);
  // Free records chained: hold entries and levels each a list from 0.
  EXPECT_EQ(h.hold_free_head, 0u);
  EXPECT_EQ(a.regions().holds[0].next, 1u);
  EXPECT_EQ(a.regions().holds[h.max_holds - 1].next, kNone);
  EXPECT_EQ(a.regions().levels[h.max_levels - 1].head, kNone);
  EXPECT_TRUE(arena_tables_have_room(h).is_ok());
}

TEST(ArenaLayout, ValidationNamesTheBadFieldAndASizeTooSmall) {
  FormattedArena a(8, 2);
  EXPECT_EQ(validate_arena(a.mem(), a.bytes() - 1).code(), ErrorCode::kVersionMismatch);
  a.header().off_holds += 64;
  Status s = validate_arena(a.mem(), a.bytes());
  EXPECT_EQ(s.code(), ErrorCode::kVersionMismatch);
  EXPECT_NE(s.message().find("off_holds"), std::string::npos) << s.to_string();
  a.header().off_holds -= 64;
  a.header().version = kArenaVersion + 1;
  EXPECT_NE(validate_arena(a.mem(), a.bytes()).message().find("version"), std::string::npos);
  a.header().version = kArenaVersion;
  a.header().magic = 0;
  EXPECT_NE(validate_arena(a.mem(), a.bytes()).message().find("magic"), std::string::npos);
}

TEST(ArenaLayout, TablesOverHalfFullAreRefused) {
  FormattedArena a(8, 2);
  const uint32_t cap = a.header().table_capacity;
  for (uint32_t i = 0; i <= cap / 2; ++i) a.regions().table[i].used = 1;
  Status s = arena_tables_have_room(a.header());
  EXPECT_EQ(s.code(), ErrorCode::kInternal);
  EXPECT_NE(s.message().find("hash table"), std::string::npos) << s.to_string();
}

// The const view reads a PROT_READ mapping: any write through it would fault.
TEST(ArenaLayout, ConstRegionsOfAReadOnlyMappingFindEveryRegion) {
  FormattedArena a(8, 2);
  const long page = ::sysconf(_SC_PAGESIZE);
  const size_t len = (a.bytes() + page - 1) / page * page;
  void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  std::memcpy(m, a.mem(), a.bytes());
  ASSERT_EQ(::mprotect(m, len, PROT_READ), 0);
  const void* ro = m;
  ASSERT_TRUE(validate_arena(ro, a.bytes()).is_ok());
  ConstArenaRegions r = locate_regions(ro);
  EXPECT_EQ(reinterpret_cast<const char*>(r.blocks) - static_cast<const char*>(ro),
            static_cast<ptrdiff_t>(a.layout().blocks));
  EXPECT_EQ(reinterpret_cast<const char*>(r.checksums) - static_cast<const char*>(ro),
            static_cast<ptrdiff_t>(a.layout().checksums));
  EXPECT_EQ(r.owners[1].mutable_head, kNone);
  ::munmap(m, len);
}

}  // namespace
}  // namespace kvpool::pool
