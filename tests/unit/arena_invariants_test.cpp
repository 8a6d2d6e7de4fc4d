// The arena's invariants (arena_invariants.hpp), checked over a const view: a sound pool
// passes after real traffic, and each kind of break is named.
#include "kvpool/pool/arena_invariants.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kvpool/pool/pool_core.hpp"

namespace kvpool::pool {
namespace {

// A pool with a free block, a mutable one, an active one held twice and an inactive one.
class Traffic {
 public:
  Traffic() {
    const PoolCoreConfig c{8, 3, 0};
    bytes_ = *PoolCore::arena_bytes(c);
    mem_ = static_cast<char*>(std::aligned_alloc(64, bytes_));
    core_ = std::move(PoolCore::create(mem_, bytes_, c, 0, "g").value());
    BlockRef b[3];
    EXPECT_TRUE(core_.allocate(0, 3, b).is_ok());
    mutable_id = b[2].id;
    RegisterItem items[2] = {{b[0], 100, 1, 0, 0, 0}, {b[1], 200, 2, 0, 4, 0}};
    BlockRef out[2];
    EXPECT_TRUE(core_.register_blocks(0, items, out).is_ok());
    active_id = out[0].id;
    inactive_id = out[1].id;
    EXPECT_TRUE(core_.release_immutable(0, {&out[1], 1}).is_ok());
    const uint64_t h = 100;
    BlockRef m;
    EXPECT_EQ(*core_.match(1, {&h, 1}, &m), 1u);
  }
  ~Traffic() { std::free(mem_); }
  Status check() const { return check_arena_invariants(core_.regions()); }
  BlockMeta& block(uint32_t id) { return locate_regions(mem_).blocks[id]; }
  ArenaRegions regions() { return locate_regions(mem_); }

  uint32_t active_id = 0, inactive_id = 0, mutable_id = 0;

 private:
  size_t bytes_ = 0;
  char* mem_ = nullptr;
  PoolCore core_;
};

void expect_break(const Status& s, const std::string& words) {
  EXPECT_EQ(s.code(), ErrorCode::kInternal) << s.to_string();
  EXPECT_NE(s.message().find(words), std::string::npos) << s.to_string();
}

TEST(ArenaInvariants, ASoundPoolPasses) {
  Traffic t;
  EXPECT_TRUE(t.check().is_ok()) << t.check().to_string();
}

TEST(ArenaInvariants, AStateOutOfRangeIsNamed) {
  Traffic t;
  t.block(t.mutable_id).state = 4;
  expect_break(t.check(), "block " + std::to_string(t.mutable_id) + " has state 4");
}

TEST(ArenaInvariants, AStateThatDisagreesWithItsListIsFound) {
  Traffic t;
  // An inactive block marked free: the gauges no longer match the states.
  t.block(t.inactive_id).state = static_cast<uint8_t>(BlockStateCode::kFree);
  expect_break(t.check(), "state counters disagree");
}

TEST(ArenaInvariants, AFreeListThroughAnotherStateIsCorrupt) {
  Traffic t;
  ArenaRegions r = t.regions();
  const uint32_t head = r.header->free_head;
  ASSERT_NE(head, kNone);
  r.blocks[head].next = t.mutable_id;  // the free list now runs into a mutable block
  expect_break(t.check(), "free list is corrupt");
}

TEST(ArenaInvariants, APoisonedBlockMustBeActiveAndOutOfTheRegistry) {
  Traffic t;
  t.block(t.inactive_id).flags |= kFlagPoisoned;
  expect_break(t.check(), "poisoned block " + std::to_string(t.inactive_id) + " is not active");
}

TEST(ArenaInvariants, ARefcountThatHoldersDoNotAddUpToIsNamed) {
  Traffic t;
  t.block(t.active_id).refcount += 1;
  expect_break(t.check(), "refcount");
}

TEST(ArenaInvariants, ALevelCountBeyondItsCapacityIsFound) {
  Traffic t;
  ArenaRegions r = t.regions();
  r.header->level_count = r.header->max_levels + 1;
  expect_break(t.check(), "exceeds max_levels");
}

}  // namespace
}  // namespace kvpool::pool
