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

#include "kvpool/pool/pool_core.hpp"
#include "kvpool/pool/previous_arena.hpp"

namespace kvpool::pool {
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

}  // namespace

Status arena_tables_have_room(const ArenaHeader& h) {
  const char* base = reinterpret_cast<const char*>(&h);
  const struct {
    const char* name;
    uint64_t offset;
    uint32_t capacity;
  } tables[] = {{"hash table", h.off_table, h.table_capacity},
                {"hold table", h.off_hold_table, h.hold_table_capacity},
                {"level table", h.off_level_table, h.level_table_capacity}};
  for (const auto& t : tables) {
    const auto* e = reinterpret_cast<const TableEntry*>(base + t.offset);
    uint32_t used = 0;
    for (uint32_t i = 0; i < t.capacity; ++i) used += e[i].used != 0;
    if (used > t.capacity / 2)
      return Status(ErrorCode::kInternal, std::string("the ") + t.name + " has " +
                                              std::to_string(used) + " of " +
                                              std::to_string(t.capacity) +
                                              " slots used; a sound one is at most half full");
  }
  return Status::ok();
}

Result<PoolCore> open_previous_arena(const void* memory, size_t bytes, std::string name) {
  // attach() validates the header; this core is only read (no write call is made on it).
  auto prev = PoolCore::attach(const_cast<void*>(memory), bytes, 0, std::move(name));
  if (!prev) return prev.status();
  KVPOOL_RETURN_IF_ERROR(arena_tables_have_room(prev->header()));
  // Its daemon died between two pool calls: then every structure was complete, and any
  // broken invariant means someone wrote where nobody may. Nothing of it is served.
  if ((prev->header().stats.write_seq.load(std::memory_order_relaxed) & 1) == 0)
    if (Status inv = prev->check_invariants(); !inv.is_ok())
      return Status(ErrorCode::kInternal, "its arena is corrupt (" + inv.message() + ")");
  return prev;
}

Result<AdoptCounts> PoolCore::adopt_registry(const PoolCore& previous,
                                             std::span<const uint8_t> live_owners, uint32_t keeper,
                                             std::vector<AdoptPin>* pins) {
  // `previous` is hostile input: attach() validated every size and offset of its header
  // against its block count, and every index read below is bounded before use (a block id
  // by num_blocks, an owner by live_owners, a hold by max_holds).
  const ArenaHeader& ph = *previous.header_;
  if (ph.num_blocks != header_->num_blocks)
    return Status(ErrorCode::kInvalidState,
                  "pool '" + name_ + "': the previous arena has " + std::to_string(ph.num_blocks) +
                      " blocks, this pool " + std::to_string(header_->num_blocks));
  if (header_->stats.free_blocks.load(std::memory_order_relaxed) != header_->num_blocks ||
      header_->registered != 0)
    return Status(ErrorCode::kInvalidState,
                  "pool '" + name_ + "': adoption needs a freshly created pool");

  // A linear-probing look-up ends at an empty slot: a scribbled table with none would never
  // end. (validate() bounded its capacity and offset by the block count.)
  KVPOOL_RETURN_IF_ERROR(arena_tables_have_room(previous.header()));

  if (!live_owners.empty() && keeper >= header_->max_owners)
    return Status(ErrorCode::kInvalidState,
                  "pool '" + name_ + "': no owner to keep the previous clients' blocks");

  AdoptCounts out;
  out.interrupted = (ph.stats.write_seq.load(std::memory_order_relaxed) & 1) != 0;
  const uint32_t n = header_->num_blocks;
  // What live previous clients held: their mutable blocks and every block a hold of theirs
  // names. (In an interrupted arena a hold may be half-written: pinning a block too many is
  // safe, it only stays out of circulation a while longer.)
  std::vector<uint8_t> pinned(n, 0);
  auto live = [&](uint32_t owner) { return owner < live_owners.size() && live_owners[owner]; };
  if (!live_owners.empty()) {
    for (uint32_t id = 0; id < n; ++id) {
      const BlockMeta& m = previous.blocks_[id];
      if (m.state == static_cast<uint8_t>(BlockStateCode::kMutable) && live(m.owner)) {
        pinned[id] = 1;
        if (pins) pins->push_back({m.owner, id, m.generation, 0});
      }
    }
    for (uint32_t h = 0; h < ph.max_holds; ++h) {
      const HoldEntry& e = previous.holds_[h];
      if (e.count > 0 && e.block < n && live(e.owner)) {
        pinned[e.block] = 1;
        if (pins)
          pins->push_back({e.owner, e.block, previous.blocks_[e.block].generation, e.count});
      }
    }
  }
  struct Kept {
    uint32_t id;
    bool was_active;
    uint64_t order;  // returned_tick (inactive) or acquired_tick (active)
  };
  std::vector<Kept> kept;
  std::vector<uint32_t> kept_held, withheld;  // for live clients: registered; the others
  std::vector<uint8_t> keep(n, 0);            // not free: kept or withheld
  uint32_t holds_left = holds_free();
  for (uint32_t id = 0; id < n; ++id) {
    const BlockMeta& m = previous.blocks_[id];
    const auto st = static_cast<BlockStateCode>(m.state);
    if (st == BlockStateCode::kMutable && !pinned[id]) ++out.freed;
    const bool registered_state = st == BlockStateCode::kActive || st == BlockStateCode::kInactive;
    const bool proven = registered_state && (m.flags & kFlagPoisoned) == 0 &&
                        previous.table_.find(m.sequence_hash) == id;
    // A state byte out of range, a poisoned block, or no witness.
    if (st != BlockStateCode::kFree && st != BlockStateCode::kMutable && !proven) ++out.dropped;
    if (pinned[id]) {
      keep[id] = 1;
      if (proven && holds_left > 0) {
        --holds_left;
        kept_held.push_back(id);
      } else {
        withheld.push_back(id);
      }
      continue;
    }
    if (!proven) continue;
    keep[id] = 1;
    kept.push_back({id, st == BlockStateCode::kActive,
                    st == BlockStateCode::kActive ? m.acquired_tick : m.returned_tick});
  }
  std::sort(kept.begin(), kept.end(), [](const Kept& a, const Kept& b) {
    if (a.was_active != b.was_active) return !a.was_active;
    return a.order < b.order;
  });

  // No write section: nobody reads this arena before the daemon says READY.
  // Ticks go on from the previous daemon's, so every tick issued from here on is newer.
  header_->tick = std::max(header_->tick, ph.tick);
  // The free FIFO again, without the kept blocks, in id order.
  header_->free_head = kNone;
  header_->free_tail = kNone;
  header_->stats.free_blocks.store(0, std::memory_order_relaxed);
  for (uint32_t id = 0; id < n; ++id) {
    blocks_[id].generation = previous.blocks_[id].generation;
    if (!keep[id]) free_push(id);
  }
  for (const Kept& k : kept) {
    const BlockMeta& m = previous.blocks_[k.id];
    BlockMeta& b = blocks_[k.id];
    copy_registration(m, b);
    b.returned_tick = ++header_->tick;
    b.refcount = 0;
    checksums_[k.id] = previous.checksums_[k.id];
    table_.insert(b.sequence_hash, k.id);
    ++header_->registered;
    inactive_push(k.id);
  }
  for (uint32_t id : kept_held) {  // registered, one reference held by the keeper
    const BlockMeta& m = previous.blocks_[id];
    BlockMeta& b = blocks_[id];
    copy_registration(m, b);
    b.returned_tick = m.returned_tick;
    b.state = static_cast<uint8_t>(BlockStateCode::kActive);
    b.refcount = 1;
    b.prev = kNone;
    b.next = kNone;
    checksums_[id] = previous.checksums_[id];
    table_.insert(b.sequence_hash, id);
    ++header_->registered;
    add_hold(keeper, id);
    auto& active = header_->stats.active_blocks;
    active.store(active.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  for (uint32_t id : withheld) owner_mutable_push(keeper, id);  // in nobody's reach
  out.adopted = static_cast<uint32_t>(kept.size() + kept_held.size());
  out.pinned = static_cast<uint32_t>(kept_held.size() + withheld.size());
  if (Status s = check_invariants(); !s.is_ok())
    return Status(
        ErrorCode::kInternal,
        "pool '" + name_ + "': the adopted registry fails its invariants: " + s.message());
  return out;
}

}  // namespace kvpool::pool
