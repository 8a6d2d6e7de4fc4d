// The free FIFO (free_fifo.hpp): oldest free first, reset on return, its gauge kept.
#include "kvpool/pool/free_fifo.hpp"

#include <gtest/gtest.h>

#include "formatted_arena.hpp"

namespace kvpool::pool {
namespace {

TEST(FreeFifo, HandsOutInTheOrderReturned) {
  FormattedArena a(8);
  FreeFifo fifo(a.regions());
  EXPECT_TRUE(fifo.empty());
  for (uint32_t id : {5u, 2u, 7u}) fifo.push(id);
  EXPECT_EQ(fifo.size(), 3u);
  EXPECT_EQ(fifo.pop(), 5u);
  fifo.push(0);
  EXPECT_EQ(fifo.pop(), 2u);
  EXPECT_EQ(fifo.pop(), 7u);
  EXPECT_EQ(fifo.pop(), 0u);
  EXPECT_TRUE(fifo.empty());
  EXPECT_EQ(fifo.size(), 0u);
  EXPECT_EQ(a.header().free_tail, kNone);
}

TEST(FreeFifo, APushedBlockIsResetToFree) {
  FormattedArena a(4);
  FreeFifo fifo(a.regions());
  BlockMeta& b = a.block(3);
  b.state = static_cast<uint8_t>(BlockStateCode::kActive);
  b.flags = kFlagPoisoned | kFlagHasParent;
  b.prev = 1;
  fifo.push(3);
  EXPECT_EQ(b.state, static_cast<uint8_t>(BlockStateCode::kFree));
  EXPECT_EQ(b.flags, 0u);
  EXPECT_EQ(b.prev, kNone);
  EXPECT_EQ(b.next, kNone);
  EXPECT_EQ(a.header().free_head, 3u);
  EXPECT_EQ(a.header().stats.free_blocks.load(), 1u);
}

}  // namespace
}  // namespace kvpool::pool
