// The arena of a daemon that is gone, opened for adoption (issue 27, item 2): a const view,
// so adoption reads the predecessor's read-only mapping without ever holding anything that
// could write it. Anyone of the daemon's uid may have written it while no daemon ran: it is
// hostile input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvpool/core/status.hpp"
#include "kvpool/pool/arena.hpp"
#include "kvpool/pool/arena_layout.hpp"
#include "kvpool/pool/flat_table.hpp"

namespace kvpool::pool {

class PreviousArena {
 public:
  // A view of an arena whose header validate_arena() passed (open() checks more).
  PreviousArena(const ConstArenaRegions& arena, std::string name)
      : arena_(arena), table_(arena.table, arena.header->table_capacity), name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  const ArenaHeader& header() const { return *arena_.header; }
  uint32_t num_blocks() const { return arena_.header->num_blocks; }
  const ConstArenaRegions& regions() const { return arena_; }
  // Callers bound `id` by num_blocks() and `h` by header().max_holds.
  const BlockMeta& block(uint32_t id) const { return arena_.blocks[id]; }
  const HoldEntry& hold(uint32_t h) const { return arena_.holds[h]; }
  uint64_t checksum(uint32_t id) const { return arena_.checksums[id]; }
  // The block its registry names for `sequence_hash`, or kNone.
  uint32_t find(uint64_t sequence_hash) const { return table_.find(sequence_hash); }
  // Its writer died inside a call (odd write sequence): structures may be half-written.
  bool interrupted() const {
    return (arena_.header->stats.write_seq.load(std::memory_order_relaxed) & 1) != 0;
  }

 private:
  ConstArenaRegions arena_;
  FlatTableReader table_;
  std::string name_;
};

// validate_arena() (every size, capacity and offset of its header against what its block
// count and limits make them, each error naming the field), every hash table with the empty
// slots that end a probe, and, when its writer died between two calls (write sequence
// even), every invariant. What passes is safe for PoolCore::adopt_registry, which bounds
// every index it reads. `memory` is only read. An error says what is wrong; the caller
// starts that pool empty.
Result<PreviousArena> open_previous_arena(const void* memory, size_t bytes, std::string name);

}  // namespace kvpool::pool
