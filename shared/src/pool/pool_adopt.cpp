// Adoption of a previous daemon's registry (issue 15): PoolCore::adopt_registry.
//
// The previous daemon may have been killed anywhere, including inside a pool call with the
// arena half-written (its write sequence is then odd). Nothing of its structures is reused
// as is. The new registry is rebuilt from per-block records, and a block is kept only when
// two independent records agree that it is registered:
//   1. its BlockMeta says active or inactive, not poisoned, with sequence hash H, and
//   2. the previous hash table, looked up with H, names this very block.
// Every path that registers a block writes both (the meta first, then the table entry), and
// every path that takes a block out of the registry (eviction, poisoning) erases the table
// entry before the block's meta is reused; a table entry is one 16-byte struct that a
// torn backward-shift could leave pointing at a wrong block, which check 1 then catches (the
// meta of that block names another hash). A block half-way through either path fails one
// check and is dropped: its bytes may be a new owner's, or not yet the registered ones.
// What passes names bytes its registering client committed, under the hash it committed
// them with; nobody was allowed to write them since.
//
// Kept blocks become inactive (whoever held them is gone; a client that reattaches takes its
// references again by matching). Their order of eviction is kept: the previously inactive
// ones first, in the order they were returned, then the previously active ones in the order
// they were acquired. Every other block is free, mutable blocks included (their owners are
// gone). Except what a client of the previous daemon that still runs held: it can still
// read (and, for mutable blocks, write) them through its mapping, so handing them to someone
// else would show it reused memory. Those stay out of circulation under the keeper owner:
// registered and proven ones active (matchable, one reference), the others mutable; the
// daemon releases the keeper once those clients have exited. Generations are carried over for every
// block, so a handle the previous daemon issued stays exactly as stale (or as valid) as it was.
//
// Cost: O(blocks) plus a sort of the kept ones; no KV byte is read.
#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "kvpool/pool/arena_invariants.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/pool/previous_arena.hpp"

namespace kvpool::pool {

// What adoption does with each block of the previous arena, decided before anything of this
// core changes.
struct AdoptionPlan {
  struct Kept {
    uint32_t id;
    bool was_active;
    uint64_t order;  // returned_tick (inactive) or acquired_tick (active)
  };
  std::vector<Kept> kept;      // proven registered, nobody live holds them: inactive
  std::vector<uint32_t> held;  // proven registered, a live client holds them: keeper's reference
  std::vector<uint32_t> withheld;  // a live client holds them, unproven: keeper's mutable block
  std::vector<uint8_t> keep;       // per block: not free (kept, held or withheld)
};

namespace {

// What a kept block carries over from its record in the old arena: its registration and
// when it was last taken. State, references and list links are the new arena's own.
void copy_registration(const BlockMeta& m, BlockMeta& b) {
  b.sequence_hash = m.sequence_hash;
  b.block_hash = m.block_hash;
  b.parent_hash = m.parent_hash;
  b.priority = m.priority;
  b.flags = static_cast<uint8_t>(m.flags & kFlagHasParent);
  b.acquired_tick = m.acquired_tick;
}

// What live previous clients held: their mutable blocks and every block a hold of theirs
// names. (In an interrupted arena a hold may be half-written: pinning a block too many is
// safe, it only stays out of circulation a while longer.)
std::vector<uint8_t> find_pinned(const PreviousArena& prev, std::span<const uint8_t> live_owners,
                                 std::vector<AdoptPin>* pins) {
  const uint32_t n = prev.num_blocks();
  std::vector<uint8_t> pinned(n, 0);
  if (live_owners.empty()) return pinned;
  auto live = [&](uint32_t owner) { return owner < live_owners.size() && live_owners[owner]; };
  for (uint32_t id = 0; id < n; ++id) {
    const BlockMeta& m = prev.block(id);
    if (m.state == static_cast<uint8_t>(BlockStateCode::kMutable) && live(m.owner)) {
      pinned[id] = 1;
      if (pins) pins->push_back({m.owner, id, m.generation, 0});
    }
  }
  for (uint32_t h = 0; h < prev.header().max_holds; ++h) {
    const HoldEntry& e = prev.hold(h);
    if (e.count > 0 && e.block < n && live(e.owner)) {
      pinned[e.block] = 1;
      if (pins) pins->push_back({e.owner, e.block, prev.block(e.block).generation, e.count});
    }
  }
  return pinned;
}

}  // namespace

Result<PreviousArena> open_previous_arena(const void* memory, size_t bytes, std::string name) {
  KVPOOL_RETURN_IF_ERROR(validate_arena(memory, bytes));
  PreviousArena prev(locate_regions(memory), std::move(name));
  KVPOOL_RETURN_IF_ERROR(arena_tables_have_room(prev.header()));
  // Its daemon died between two pool calls: then every structure was complete, and any
  // broken invariant means someone wrote where nobody may. Nothing of it is served.
  if (!prev.interrupted())
    if (Status inv = check_arena_invariants(prev.regions()); !inv.is_ok())
      return Status(ErrorCode::kInternal, "its arena is corrupt (" + inv.message() + ")");
  return prev;
}

Status PoolCore::adopt_checks(const PreviousArena& previous, std::span<const uint8_t> live_owners,
                              uint32_t keeper) const {
  const ArenaHeader& h = *arena_.header;
  if (previous.num_blocks() != h.num_blocks)
    return Status(ErrorCode::kInvalidState, "pool '" + name_ + "': the previous arena has " +
                                                std::to_string(previous.num_blocks()) +
                                                " blocks, this pool " +
                                                std::to_string(h.num_blocks));
  if (free_.size() != h.num_blocks || registry_.size() != 0)
    return Status(ErrorCode::kInvalidState,
                  "pool '" + name_ + "': adoption needs a freshly created pool");
  // A linear-probing look-up ends at an empty slot: a scribbled table with none would never
  // end. (validate_arena() bounded its capacity and offset by the block count.)
  KVPOOL_RETURN_IF_ERROR(arena_tables_have_room(previous.header()));
  if (!live_owners.empty() && keeper >= h.max_owners)
    return Status(ErrorCode::kInvalidState,
                  "pool '" + name_ + "': no owner to keep the previous clients' blocks");
  return Status::ok();
}

namespace {

// Sorts every block of the previous arena into the plan, counting what is freed and dropped.
// `holds_left`: hold entries the keeper may take for blocks live clients hold.
void plan_adoption(const PreviousArena& prev, const std::vector<uint8_t>& pinned,
                   uint32_t holds_left, AdoptionPlan& plan, AdoptCounts& out) {
  const uint32_t n = prev.num_blocks();
  plan.keep.assign(n, 0);
  for (uint32_t id = 0; id < n; ++id) {
    const BlockMeta& m = prev.block(id);
    const auto st = static_cast<BlockStateCode>(m.state);
    if (st == BlockStateCode::kMutable && !pinned[id]) ++out.freed;
    const bool registered_state = st == BlockStateCode::kActive || st == BlockStateCode::kInactive;
    const bool proven =
        registered_state && (m.flags & kFlagPoisoned) == 0 && prev.find(m.sequence_hash) == id;
    // A state byte out of range, a poisoned block, or no witness.
    if (st != BlockStateCode::kFree && st != BlockStateCode::kMutable && !proven) ++out.dropped;
    if (pinned[id]) {
      plan.keep[id] = 1;
      if (proven && holds_left > 0) {
        --holds_left;
        plan.held.push_back(id);
      } else {
        plan.withheld.push_back(id);
      }
      continue;
    }
    if (!proven) continue;
    plan.keep[id] = 1;
    plan.kept.push_back({id, st == BlockStateCode::kActive,
                         st == BlockStateCode::kActive ? m.acquired_tick : m.returned_tick});
  }
  // The previously inactive first in return order, then the previously active in the order
  // they were acquired.
  std::sort(plan.kept.begin(), plan.kept.end(),
            [](const AdoptionPlan::Kept& a, const AdoptionPlan::Kept& b) {
              if (a.was_active != b.was_active) return !a.was_active;
              return a.order < b.order;
            });
}

}  // namespace

void PoolCore::adopt_apply(const PreviousArena& previous, const AdoptionPlan& plan,
                           uint32_t keeper) {
  ArenaHeader& h = *arena_.header;
  // Ticks go on from the previous daemon's, so every tick issued from here on is newer.
  h.tick = std::max(h.tick, previous.header().tick);
  // The free FIFO again, without the kept blocks, in id order.
  h.free_head = kNone;
  h.free_tail = kNone;
  h.stats.free_blocks.store(0, std::memory_order_relaxed);
  for (uint32_t id = 0; id < h.num_blocks; ++id) {
    arena_.blocks[id].generation = previous.block(id).generation;
    if (!plan.keep[id]) free_.push(id);
  }
  for (const AdoptionPlan::Kept& k : plan.kept) {
    BlockMeta& b = arena_.blocks[k.id];
    copy_registration(previous.block(k.id), b);
    b.returned_tick = ++h.tick;
    b.refcount = 0;
    arena_.checksums[k.id] = previous.checksum(k.id);
    registry_.insert(b.sequence_hash, k.id);
    inactive_.push(k.id);
  }
  for (uint32_t id : plan.held) {  // registered, one reference held by the keeper
    const BlockMeta& m = previous.block(id);
    BlockMeta& b = arena_.blocks[id];
    copy_registration(m, b);
    b.returned_tick = m.returned_tick;
    b.state = static_cast<uint8_t>(BlockStateCode::kActive);
    b.refcount = 1;
    b.prev = kNone;
    b.next = kNone;
    arena_.checksums[id] = previous.checksum(id);
    registry_.insert(b.sequence_hash, id);
    holds_.add(keeper, id);
    auto& active = h.stats.active_blocks;
    active.store(active.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  for (uint32_t id : plan.withheld) holds_.push_mutable(keeper, id);  // in nobody's reach
}

Result<AdoptCounts> PoolCore::adopt_registry(const PreviousArena& previous,
                                             std::span<const uint8_t> live_owners, uint32_t keeper,
                                             std::vector<AdoptPin>* pins) {
  // `previous` is hostile input: validate_arena() checked every size and offset of its
  // header against its block count, and every index read here is bounded before use (a
  // block id by num_blocks, an owner by live_owners, a hold by max_holds).
  KVPOOL_RETURN_IF_ERROR(adopt_checks(previous, live_owners, keeper));
  AdoptCounts out;
  out.interrupted = previous.interrupted();
  const std::vector<uint8_t> pinned = find_pinned(previous, live_owners, pins);
  AdoptionPlan plan;
  plan_adoption(previous, pinned, holds_.free_entries(), plan, out);
  // No write section: nobody reads this arena before the daemon says READY.
  adopt_apply(previous, plan, keeper);
  out.adopted = static_cast<uint32_t>(plan.kept.size() + plan.held.size());
  out.pinned = static_cast<uint32_t>(plan.held.size() + plan.withheld.size());
  if (Status s = check_invariants(); !s.is_ok())
    return Status(
        ErrorCode::kInternal,
        "pool '" + name_ + "': the adopted registry fails its invariants: " + s.message());
  return out;
}

Result<AdoptCounts> PoolCore::adopt_registry(const PoolCore& previous,
                                             std::span<const uint8_t> live_owners, uint32_t keeper,
                                             std::vector<AdoptPin>* pins) {
  return adopt_registry(PreviousArena(previous.regions(), previous.name()), live_owners, keeper,
                        pins);
}

}  // namespace kvpool::pool
