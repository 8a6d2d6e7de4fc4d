// The registry: sequence hash -> the registered block that holds it (active or inactive,
// never poisoned), and the events that say when a registration begins and ends. Every change
// of the registry goes through here, so what subscribers hear (events.hpp) is what the table
// holds.
#pragma once

#include <cstdint>
#include <span>

#include "kvpool/pool/arena.hpp"
#include "kvpool/pool/arena_layout.hpp"
#include "kvpool/pool/events.hpp"
#include "kvpool/pool/flat_table.hpp"

namespace kvpool::pool {

class Registry {
 public:
  Registry() = default;
  Registry(const ArenaRegions& arena, uint32_t pool_index)
      : header_(arena.header),
        table_(arena.table, arena.header->table_capacity),
        pool_index_(pool_index) {}

  void set_sink(EventSink* sink) { sink_ = sink; }

  // The block registered under `sequence_hash`, or kNone.
  uint32_t find(uint64_t sequence_hash) const { return table_.find(sequence_hash); }
  void prefetch(uint64_t sequence_hash) const { table_.prefetch(sequence_hash); }
  // Registered blocks (ArenaHeader::registered).
  uint32_t size() const { return header_->registered; }

  // Block `id` now holds `sequence_hash` (absent until now). Its Stored event goes with its
  // call's batch (publish_stored), or none (adoption: the registration is an old one).
  void insert(uint64_t sequence_hash, uint32_t id);
  // The registration of `sequence_hash` ends (eviction, poisoning): out of the table, and a
  // Removed event.
  void remove(uint64_t sequence_hash);
  // One Stored event batch for the blocks one call registered (none for an empty batch).
  void publish_stored(std::span<const StoredBlock> blocks) const;

 private:
  ArenaHeader* header_ = nullptr;
  FlatTable table_;
  EventSink* sink_ = nullptr;
  uint32_t pool_index_ = 0;
};

}  // namespace kvpool::pool
