// What each owner (a client slot; 0 in-process) holds in one pool: its mutable blocks (a
// list through BlockMeta::prev/next) and its references on registered blocks, one hold entry
// per (owner, block) with a count, linked per owner and found through the hold table. So a
// dead client's blocks go back in O(what it held), never clients x blocks.
#pragma once

#include <cstdint>

#include "kvpool/pool/arena.hpp"
#include "kvpool/pool/arena_layout.hpp"
#include "kvpool/pool/flat_table.hpp"

namespace kvpool::pool {

class OwnerHolds {
 public:
  OwnerHolds() = default;
  explicit OwnerHolds(const ArenaRegions& arena)
      : header_(arena.header),
        blocks_(arena.blocks),
        owners_(arena.owners),
        holds_(arena.holds),
        table_(arena.hold_table, arena.header->hold_table_capacity) {}

  static uint64_t key(uint32_t owner, uint32_t id) {
    return (static_cast<uint64_t>(owner) << 32) | id;
  }

  // ---- mutable blocks ----
  // Block `id` (in no list) becomes `owner`'s mutable block, first in its list.
  void push_mutable(uint32_t owner, uint32_t id);
  // Unlinks `owner`'s mutable block `id`; its state is the caller's to set.
  void remove_mutable(uint32_t owner, uint32_t id);

  // ---- references ----
  // References `owner` holds on block `id` (0 if none).
  uint32_t count(uint32_t owner, uint32_t id) const {
    const uint32_t h = table_.find(key(owner, id));
    return h == kNone ? 0 : holds_[h].count;
  }
  // Hold entries not in use: each new (owner, block) pair takes one.
  uint32_t free_entries() const {
    return header_->max_holds - header_->stats.holds_used.load(std::memory_order_relaxed);
  }
  // One more reference of `owner` on `id`. False (nothing changed) when a new pair needs an
  // entry and none is free: callers check free_entries() first.
  bool add(uint32_t owner, uint32_t id);
  // One reference of `owner` on `id` fewer; false when it holds none.
  bool drop(uint32_t owner, uint32_t id) { return drop(owner, id, false) != 0; }
  // Every reference of `owner` on `id`; returns how many (0: none).
  uint32_t drop_all(uint32_t owner, uint32_t id) { return drop(owner, id, true); }
  void prefetch(uint32_t owner, uint32_t id) const { table_.prefetch(key(owner, id)); }

 private:
  uint32_t drop(uint32_t owner, uint32_t id, bool all);

  ArenaHeader* header_ = nullptr;
  BlockMeta* blocks_ = nullptr;
  OwnerRecord* owners_ = nullptr;
  HoldEntry* holds_ = nullptr;
  FlatTable table_;  // key(owner, block) -> hold entry
};

}  // namespace kvpool::pool
