// Where each region of a pool arena lies (arena.hpp draws the picture): one placement
// function for the writer that formats an arena, one validation for everyone who attaches
// to one, and typed pointers to the regions of a validated arena, writable for its writer
// and const for everyone else (a dead daemon's arena, observers' copies).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kvpool/core/status.hpp"
#include "kvpool/pool/arena.hpp"

namespace kvpool::pool {

struct PoolCoreConfig {
  uint32_t num_blocks = 0;
  uint32_t max_owners = 1;
  uint32_t max_holds = 0;  // 0: 2 * num_blocks + 64
};

// Capacities and byte offsets of every region: what ArenaHeader records.
struct ArenaLayout {
  uint32_t table_capacity, hold_table_capacity, max_holds, max_levels, level_table_capacity;
  uint64_t blocks, table, levels, level_heap, level_table, owners, holds, hold_table, checksums,
      total;
};

// The layout of `config`, or kInvalidArgument naming the field out of range.
Result<ArenaLayout> arena_layout(const PoolCoreConfig& config);

// Checks an arena some writer initialised: magic, version, and every field of its header
// against what its three sizes make it, and that `bytes` holds it. kVersionMismatch names the
// first bad field.
Status validate_arena(const void* memory, size_t bytes);

// Typed pointers to the regions of one arena. Const = true: a view that can only read.
template <bool Const>
struct ArenaRegionsOf {
  template <typename T>
  using Ptr = std::conditional_t<Const, const T*, T*>;
  Ptr<ArenaHeader> header = nullptr;
  Ptr<BlockMeta> blocks = nullptr;
  Ptr<TableEntry> table = nullptr;  // sequence hash -> block
  Ptr<LevelRecord> levels = nullptr;
  Ptr<uint32_t> level_heap = nullptr;
  Ptr<TableEntry> level_table = nullptr;  // priority -> level
  Ptr<OwnerRecord> owners = nullptr;
  Ptr<HoldEntry> holds = nullptr;
  Ptr<TableEntry> hold_table = nullptr;  // (owner, block) -> hold entry
  Ptr<uint64_t> checksums = nullptr;
};
using ArenaRegions = ArenaRegionsOf<false>;
using ConstArenaRegions = ArenaRegionsOf<true>;

// The regions of an arena whose header validate_arena() (or format_arena) passed.
ArenaRegions locate_regions(void* memory);
ConstArenaRegions locate_regions(const void* memory);
ConstArenaRegions as_const(const ArenaRegions& r);

// Zeroes `layout.total` bytes at `memory` and writes a header for `config`: every list
// empty, every free record chained. The caller puts the blocks in the free FIFO.
ArenaRegions format_arena(void* memory, const PoolCoreConfig& config, const ArenaLayout& layout);

// kInternal when a hash table of the arena (whose header validate_arena() passed) is fuller
// than a sound one can be: each capacity is at least twice what it may hold, and a probe in
// a full one never ends.
Status arena_tables_have_room(const ArenaHeader& h);

}  // namespace kvpool::pool
