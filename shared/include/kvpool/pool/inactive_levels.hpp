// Inactive blocks (registered, nobody holds them, still matchable): one FIFO per priority
// level in return order, and a min-heap of the levels by priority, so the block Dynamo's
// PriorityKey orders first, (priority, returned_tick, ...), is the head of the heap's top
// level: eviction is O(1), a match unlinks in O(1). arena.hpp says why the order holds.
#pragma once

#include <cstdint>

#include "kvpool/pool/arena.hpp"
#include "kvpool/pool/arena_layout.hpp"
#include "kvpool/pool/flat_table.hpp"

namespace kvpool::pool {

class InactiveLevels {
 public:
  InactiveLevels() = default;
  explicit InactiveLevels(const ArenaRegions& arena)
      : header_(arena.header),
        blocks_(arena.blocks),
        levels_(arena.levels),
        heap_(arena.level_heap),
        table_(arena.level_table, arena.header->level_table_capacity) {}

  // Block `id` (registered, in no list) becomes inactive: the tail of its priority's level.
  void push(uint32_t id);
  // Takes the block evicted first out. The caller checks size() > 0.
  uint32_t pop();
  // Unlinks inactive block `id` (a match or register hit, or a poisoning).
  void remove(uint32_t id);
  // The writer's gauge (PoolStats::inactive_blocks), which push and remove keep.
  uint32_t size() const { return header_->stats.inactive_blocks.load(std::memory_order_relaxed); }

 private:
  uint32_t level_for(uint32_t priority);  // finds or opens the level of `priority`
  void release(uint32_t level);           // an emptied level leaves the heap
  void sift_up(uint32_t pos);
  void sift_down(uint32_t pos);

  ArenaHeader* header_ = nullptr;
  BlockMeta* blocks_ = nullptr;
  LevelRecord* levels_ = nullptr;
  uint32_t* heap_ = nullptr;
  FlatTable table_;  // priority -> level
};

}  // namespace kvpool::pool
