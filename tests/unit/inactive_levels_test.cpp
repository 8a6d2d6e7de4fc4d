// Inactive levels (inactive_levels.hpp): eviction in Dynamo's PriorityKey order, lowest
// priority first and FIFO in return order within one, whatever order levels open and close.
#include "kvpool/pool/inactive_levels.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "formatted_arena.hpp"
#include "kvpool/pool/arena_invariants.hpp"

namespace kvpool::pool {
namespace {

class Levels {
 public:
  explicit Levels(uint32_t blocks) : a(blocks), levels(a.regions()) {}
  void push(uint32_t id, uint32_t priority) {
    a.block(id).priority = priority;
    a.block(id).returned_tick = ++tick;
    levels.push(id);
  }
  FormattedArena a;
  InactiveLevels levels;
  uint64_t tick = 0;
};

TEST(InactiveLevels, PopsLowestPriorityFirstThenReturnOrder) {
  Levels l(8);
  l.push(0, 5);
  l.push(1, 1);
  l.push(2, 5);
  l.push(3, 1);
  l.push(4, 3);
  EXPECT_EQ(l.levels.size(), 5u);
  EXPECT_EQ(l.a.header().level_count, 3u);
  std::vector<uint32_t> order;
  while (l.levels.size() > 0) order.push_back(l.levels.pop());
  EXPECT_EQ(order, (std::vector<uint32_t>{1, 3, 4, 0, 2}));
  EXPECT_EQ(l.a.header().level_count, 0u);
}

TEST(InactiveLevels, RemoveUnlinksAnywhereAndClosesAnEmptyLevel) {
  Levels l(8);
  l.push(0, 2);
  l.push(1, 2);
  l.push(2, 2);
  l.push(3, 7);
  l.levels.remove(1);  // middle of its level
  EXPECT_EQ(l.a.block(0).next, 2u);
  EXPECT_EQ(l.a.block(2).prev, 0u);
  l.levels.remove(3);  // the only block of priority 7: its level closes
  EXPECT_EQ(l.a.header().level_count, 1u);
  EXPECT_EQ(l.levels.pop(), 0u);
  EXPECT_EQ(l.levels.pop(), 2u);
  EXPECT_EQ(l.levels.size(), 0u);
}

// Random pushes (random priorities) and removes against a sorted model.
TEST(InactiveLevels, RandomChurnMatchesTheSortedOrder) {
  constexpr uint32_t kBlocks = 64;
  Levels l(kBlocks);
  std::mt19937 rng(29);
  std::vector<bool> in(kBlocks, false);
  for (int step = 0; step < 4000; ++step) {
    const uint32_t id = rng() % kBlocks;
    if (!in[id]) {
      l.push(id, rng() % 6);
      in[id] = true;
    } else if (rng() % 2) {
      l.levels.remove(id);
      in[id] = false;
    } else {
      // The block popped must be the minimum of (priority, returned_tick) of those in.
      uint32_t want = kNone;
      for (uint32_t i = 0; i < kBlocks; ++i) {
        if (!in[i]) continue;
        const BlockMeta &b = l.a.block(i), *w = want == kNone ? nullptr : &l.a.block(want);
        if (!w || b.priority < w->priority ||
            (b.priority == w->priority && b.returned_tick < w->returned_tick))
          want = i;
      }
      const uint32_t got = l.levels.pop();
      ASSERT_EQ(got, want) << "step " << step;
      in[got] = false;
    }
  }
}

}  // namespace
}  // namespace kvpool::pool
