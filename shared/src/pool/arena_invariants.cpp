#include "kvpool/pool/arena_invariants.hpp"

#include <string>
#include <vector>

#include "kvpool/pool/flat_table.hpp"
#include "kvpool/pool/owner_holds.hpp"

namespace kvpool::pool {
namespace {

Status fail(std::string m) { return Status(ErrorCode::kInternal, std::move(m)); }

bool in_state(const BlockMeta& b, BlockStateCode s) { return b.state == static_cast<uint8_t>(s); }

struct Gauges {
  uint32_t free, mutable_blocks, active, inactive;
};

Gauges gauges_of(const ArenaHeader& h) {
  const PoolStats& s = h.stats;
  return Gauges{s.free_blocks.load(std::memory_order_relaxed),
                s.mutable_blocks.load(std::memory_order_relaxed),
                s.active_blocks.load(std::memory_order_relaxed),
                s.inactive_blocks.load(std::memory_order_relaxed)};
}

// Every block in a known state, and the writer's gauges counting them.
Status check_block_states(const ConstArenaRegions& a, const Gauges& c) {
  const uint32_t n = a.header->num_blocks;
  uint32_t by_state[4] = {0, 0, 0, 0};  // indexed by BlockStateCode
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t st = a.blocks[i].state;
    if (st > static_cast<uint8_t>(BlockStateCode::kInactive))
      return fail("block " + std::to_string(i) + " has state " + std::to_string(st));
    ++by_state[st];
  }
  if (c.free + c.mutable_blocks + c.active + c.inactive != n)
    return fail("counts do not add up: free " + std::to_string(c.free) + " + mutable " +
                std::to_string(c.mutable_blocks) + " + active " + std::to_string(c.active) +
                " + inactive " + std::to_string(c.inactive) + " != total " + std::to_string(n));
  using S = BlockStateCode;
  if (by_state[static_cast<int>(S::kFree)] != c.free ||
      by_state[static_cast<int>(S::kMutable)] != c.mutable_blocks ||
      by_state[static_cast<int>(S::kActive)] != c.active ||
      by_state[static_cast<int>(S::kInactive)] != c.inactive)
    return fail("state counters disagree with block states");
  return Status::ok();
}

Status check_free_fifo(const ConstArenaRegions& a, const Gauges& c) {
  const uint32_t n = a.header->num_blocks;
  uint32_t walked = 0;
  for (uint32_t id = a.header->free_head; id != kNone; id = a.blocks[id].next) {
    if (id >= n || !in_state(a.blocks[id], BlockStateCode::kFree) || ++walked > n)
      return fail("free list is corrupt");
  }
  if (walked != c.free) return fail("free list length differs from free count");
  return Status::ok();
}

// One level's FIFO: inactive blocks of this level, linked both ways, in return order.
Status check_level_list(const ConstArenaRegions& a, uint32_t lv, uint32_t& walked) {
  const uint32_t n = a.header->num_blocks;
  const LevelRecord& L = a.levels[lv];
  uint64_t last_tick = 0;
  uint32_t prev = kNone;
  for (uint32_t id = L.head; id != kNone; id = a.blocks[id].next) {
    if (id >= n)
      return fail("inactive list of priority " + std::to_string(L.priority) + " names block " +
                  std::to_string(id));
    const BlockMeta& b = a.blocks[id];
    if (!in_state(b, BlockStateCode::kInactive) || b.level != lv || b.prev != prev || ++walked > n)
      return fail("inactive list of priority " + std::to_string(L.priority) +
                  " is corrupt at block " + std::to_string(id));
    if (b.returned_tick <= last_tick) return fail("inactive list out of return order");
    last_tick = b.returned_tick;
    prev = id;
  }
  if (L.tail != prev) return fail("level tail is wrong");
  return Status::ok();
}

// Inactive levels: heap-ordered by priority, FIFO in return order, counts add up.
Status check_levels(const ConstArenaRegions& a, const Gauges& c) {
  const ArenaHeader& h = *a.header;
  if (h.level_count > h.max_levels)
    return fail("level_count " + std::to_string(h.level_count) + " exceeds max_levels " +
                std::to_string(h.max_levels));
  uint32_t walked = 0;
  for (uint32_t p = 0; p < h.level_count; ++p) {
    const uint32_t lv = a.level_heap[p];
    if (lv >= h.max_levels || a.levels[lv].heap_pos != p)
      return fail("level heap slot " + std::to_string(p) + " is corrupt");
    if (p > 0 && a.levels[lv].priority < a.levels[a.level_heap[(p - 1) / 2]].priority)
      return fail("level heap order broken");
    if (a.levels[lv].head == kNone) return fail("empty level left in the heap");
    KVPOOL_RETURN_IF_ERROR(check_level_list(a, lv, walked));
  }
  if (walked != c.inactive) return fail("inactive lists differ from inactive count");
  return Status::ok();
}

// Every registered block is findable by its hash, and the count matches; a poisoned block
// (active only) is not in it.
Status check_registry(const ConstArenaRegions& a, const Gauges& c) {
  const FlatTableReader table(a.table, a.header->table_capacity);
  uint32_t poisoned_blocks = 0;
  for (uint32_t i = 0; i < a.header->num_blocks; ++i) {
    const BlockMeta& b = a.blocks[i];
    const bool active = in_state(b, BlockStateCode::kActive);
    if ((b.flags & kFlagPoisoned) != 0) {
      if (!active)
        return fail("poisoned block " + std::to_string(i) + " is not active (state " +
                    std::to_string(b.state) + ")");
      ++poisoned_blocks;
      if (table.find(b.sequence_hash) == i)
        return fail("poisoned block " + std::to_string(i) + " is still in the registry");
      continue;
    }
    if ((active || in_state(b, BlockStateCode::kInactive)) && table.find(b.sequence_hash) != i)
      return fail("registered block " + std::to_string(i) + " is not in the registry");
  }
  if (a.header->registered + poisoned_blocks != c.active + c.inactive)
    return fail("registry size differs from active + inactive (less poisoned)");
  return Status::ok();
}

// One owner's mutable list and hold list; adds what it holds per block to `held`.
Status check_owner(const ConstArenaRegions& a, uint32_t ow, std::vector<uint64_t>& held,
                   uint64_t& entries) {
  const uint32_t n = a.header->num_blocks, max_holds = a.header->max_holds;
  const FlatTableReader hold_table(a.hold_table, a.header->hold_table_capacity);
  const OwnerRecord& o = a.owners[ow];
  uint32_t m = 0;
  for (uint32_t id = o.mutable_head; id != kNone; id = a.blocks[id].next) {
    if (id >= n || !in_state(a.blocks[id], BlockStateCode::kMutable) || a.blocks[id].owner != ow ||
        ++m > n)
      return fail("mutable list of owner " + std::to_string(ow) + " is corrupt");
  }
  if (m != o.mutable_count) return fail("mutable count of owner " + std::to_string(ow));
  uint32_t e = 0;
  uint64_t refs = 0;
  for (uint32_t h = o.hold_head; h != kNone; h = a.holds[h].next) {
    if (h >= max_holds || ++e > max_holds)  // checked before a.holds[h]
      return fail("hold list of owner " + std::to_string(ow) + " is corrupt");
    const HoldEntry& he = a.holds[h];
    if (he.owner != ow || he.block >= n || he.count == 0 ||
        !in_state(a.blocks[he.block], BlockStateCode::kActive))
      return fail("hold entry " + std::to_string(h) + " is corrupt");
    if (hold_table.find(OwnerHolds::key(ow, he.block)) != h) return fail("hold table is corrupt");
    held[he.block] += he.count;
    refs += he.count;
  }
  if (e != o.hold_entries || refs != o.hold_refs)
    return fail("hold totals of owner " + std::to_string(ow) + " are wrong");
  entries += e;
  return Status::ok();
}

// Holds: per owner lists are consistent; per block the counts sum to its refcount.
Status check_holds(const ConstArenaRegions& a) {
  const uint32_t n = a.header->num_blocks;
  std::vector<uint64_t> held(n, 0);
  uint64_t entries = 0;
  for (uint32_t ow = 0; ow < a.header->max_owners; ++ow)
    KVPOOL_RETURN_IF_ERROR(check_owner(a, ow, held, entries));
  if (entries != a.header->stats.holds_used.load(std::memory_order_relaxed))
    return fail("holds_used differs from the entries in use");
  for (uint32_t i = 0; i < n; ++i) {
    if (in_state(a.blocks[i], BlockStateCode::kActive) && held[i] != a.blocks[i].refcount)
      return fail("block " + std::to_string(i) + " refcount " +
                  std::to_string(a.blocks[i].refcount) + " but holders hold " +
                  std::to_string(held[i]));
  }
  return Status::ok();
}

}  // namespace

Status check_arena_invariants(const ConstArenaRegions& a) {
  // First: every look-up below must end (a probe stops at an empty slot).
  KVPOOL_RETURN_IF_ERROR(arena_tables_have_room(*a.header));
  const Gauges c = gauges_of(*a.header);
  KVPOOL_RETURN_IF_ERROR(check_block_states(a, c));
  KVPOOL_RETURN_IF_ERROR(check_free_fifo(a, c));
  KVPOOL_RETURN_IF_ERROR(check_levels(a, c));
  KVPOOL_RETURN_IF_ERROR(check_registry(a, c));
  return check_holds(a);
}

}  // namespace kvpool::pool
