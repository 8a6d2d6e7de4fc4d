// A freshly formatted pool arena on the heap, for the tests of the pool core's parts (free
// FIFO, levels, holds, registry, quotas, invariants): the real layout, no PoolCore around it.
#pragma once

#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "kvpool/pool/arena_layout.hpp"

namespace kvpool::pool {

class FormattedArena {
 public:
  explicit FormattedArena(uint32_t blocks, uint32_t owners = 4, uint32_t holds = 0)
      : config_{blocks, owners, holds} {
    auto layout = arena_layout(config_);
    EXPECT_TRUE(layout) << layout.status().to_string();
    layout_ = *layout;
    mem_ = static_cast<char*>(std::aligned_alloc(64, layout_.total));
    regions_ = format_arena(mem_, config_, layout_);
  }
  FormattedArena(const FormattedArena&) = delete;
  FormattedArena& operator=(const FormattedArena&) = delete;
  ~FormattedArena() { std::free(mem_); }

  const ArenaRegions& regions() const { return regions_; }
  ArenaHeader& header() { return *regions_.header; }
  BlockMeta& block(uint32_t id) { return regions_.blocks[id]; }
  const ArenaLayout& layout() const { return layout_; }
  char* mem() { return mem_; }
  size_t bytes() const { return layout_.total; }

 private:
  PoolCoreConfig config_;
  ArenaLayout layout_{};
  char* mem_ = nullptr;
  ArenaRegions regions_;
};

}  // namespace kvpool::pool
