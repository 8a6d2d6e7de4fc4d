// The free FIFO: blocks nobody holds and no registration names, handed out from the head
// (oldest free first), returned at the tail. A list through BlockMeta::next in the arena.
#pragma once

#include <cstdint>

#include "kvpool/pool/arena.hpp"
#include "kvpool/pool/arena_layout.hpp"

namespace kvpool::pool {

class FreeFifo {
 public:
  FreeFifo() = default;
  explicit FreeFifo(const ArenaRegions& arena) : header_(arena.header), blocks_(arena.blocks) {}

  // Appends block `id` (in no other list), reset: state kFree, no flags.
  void push(uint32_t id);
  // Takes the head. The caller checks empty() first.
  uint32_t pop();
  bool empty() const { return header_->free_head == kNone; }
  // The writer's gauge (PoolStats::free_blocks), which push and pop keep.
  uint32_t size() const { return header_->stats.free_blocks.load(std::memory_order_relaxed); }

 private:
  ArenaHeader* header_ = nullptr;
  BlockMeta* blocks_ = nullptr;
};

}  // namespace kvpool::pool
