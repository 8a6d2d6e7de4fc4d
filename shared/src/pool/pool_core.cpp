#include "kvpool/pool/pool_core.hpp"

#include "kvpool/pool/previous_arena.hpp"

#include "kvpool/core/checksum.hpp"
#include "kvpool/core/counter.hpp"
#include "write_section.hpp"

#include <bit>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>

namespace kvpool::pool {
namespace {

// Distinct priorities among inactive blocks at one time. Beyond it (only a client inventing
// priorities on purpose gets there) a block joins the lowest level: evicted earlier, never lost.
constexpr uint32_t kMaxLevels = 65536;

constexpr uint64_t align64(uint64_t v) { return (v + 63) & ~uint64_t{63}; }

struct Offsets {
  uint32_t table_capacity, hold_table_capacity, max_holds, max_levels, level_table_capacity;
  uint64_t blocks, table, levels, level_heap, level_table, owners, holds, hold_table, checksums,
      total;
};

Result<Offsets> compute_offsets(const PoolCoreConfig& c) {
  if (c.num_blocks == 0) return Status(ErrorCode::kInvalidArgument, "num_blocks must be > 0");
  if (c.num_blocks > (1u << 30))
    return Status(ErrorCode::kInvalidArgument,
                  "num_blocks " + std::to_string(c.num_blocks) + " exceeds the limit of 2^30");
  if (c.max_owners == 0 || c.max_owners > (1u << 20))
    return Status(ErrorCode::kInvalidArgument,
                  "max_owners must be in [1, 2^20], got " + std::to_string(c.max_owners));
  Offsets o{};
  uint64_t holds = c.max_holds ? c.max_holds : uint64_t{2} * c.num_blocks + 64;
  if (holds > (1u << 30))
    return Status(ErrorCode::kInvalidArgument, "max_holds exceeds the limit of 2^30");
  o.max_holds = static_cast<uint32_t>(holds);
  o.table_capacity = std::bit_ceil(std::max<uint32_t>(16, 2 * c.num_blocks));
  o.hold_table_capacity = std::bit_ceil(std::max<uint32_t>(16, 2 * o.max_holds));
  o.max_levels = std::min<uint32_t>(c.num_blocks, kMaxLevels);
  o.level_table_capacity = std::bit_ceil(std::max<uint32_t>(16, 2 * o.max_levels));
  uint64_t off = align64(sizeof(ArenaHeader));
  o.blocks = off;
  off = align64(off + uint64_t{c.num_blocks} * sizeof(BlockMeta));
  o.table = off;
  off = align64(off + uint64_t{o.table_capacity} * sizeof(TableEntry));
  o.levels = off;
  off = align64(off + uint64_t{o.max_levels} * sizeof(LevelRecord));
  o.level_heap = off;
  off = align64(off + uint64_t{o.max_levels} * sizeof(uint32_t));
  o.level_table = off;
  off = align64(off + uint64_t{o.level_table_capacity} * sizeof(TableEntry));
  o.owners = off;
  off = align64(off + uint64_t{c.max_owners} * sizeof(OwnerRecord));
  o.holds = off;
  off = align64(off + uint64_t{o.max_holds} * sizeof(HoldEntry));
  o.hold_table = off;
  off = align64(off + uint64_t{o.hold_table_capacity} * sizeof(TableEntry));
  o.checksums = off;
  off = align64(off + uint64_t{c.num_blocks} * sizeof(uint64_t));
  o.total = off;
  return o;
}

std::string handle_text(BlockRef r) {
  return "block " + std::to_string(r.id) + " (generation " + std::to_string(r.generation) + ")";
}

}  // namespace

Result<size_t> PoolCore::arena_bytes(const PoolCoreConfig& config) {
  auto o = compute_offsets(config);
  if (!o) return o.status();
  return static_cast<size_t>(o->total);
}

Result<PoolCore> PoolCore::create(void* memory, size_t bytes, const PoolCoreConfig& config,
                                  uint32_t pool_index, std::string name) {
  auto o = compute_offsets(config);
  if (!o) return o.status();
  if (memory == nullptr || reinterpret_cast<uintptr_t>(memory) % 64 != 0)
    return Status(ErrorCode::kInvalidArgument, "arena memory must be 64-byte aligned");
  if (bytes < o->total)
    return Status(ErrorCode::kInvalidArgument, "arena of " + std::to_string(bytes) +
                                                   " bytes is too small, need " +
                                                   std::to_string(o->total));
  std::memset(memory, 0, o->total);
  auto* h = new (memory) ArenaHeader{};
  h->magic = kArenaMagic;
  h->version = kArenaVersion;
  h->num_blocks = config.num_blocks;
  h->max_owners = config.max_owners;
  h->max_holds = o->max_holds;
  h->table_capacity = o->table_capacity;
  h->hold_table_capacity = o->hold_table_capacity;
  h->off_blocks = o->blocks;
  h->off_table = o->table;
  h->max_levels = o->max_levels;
  h->level_table_capacity = o->level_table_capacity;
  h->off_levels = o->levels;
  h->off_level_heap = o->level_heap;
  h->off_level_table = o->level_table;
  h->off_owners = o->owners;
  h->off_holds = o->holds;
  h->off_hold_table = o->hold_table;
  h->off_checksums = o->checksums;
  h->total_bytes = o->total;
  h->free_head = kNone;
  h->free_tail = kNone;
  h->hold_free_head = o->max_holds ? 0 : kNone;
  h->level_free_head = 0;

  auto core = attach(memory, bytes, pool_index, std::move(name));
  if (!core) return core.status();
  PoolCore& p = core.value();
  for (uint32_t i = 0; i < config.num_blocks; ++i) {
    BlockMeta& b = p.blocks_[i];
    b.prev = kNone;
    b.next = kNone;
    p.free_push(i);
  }
  for (uint32_t i = 0; i < config.max_owners; ++i) {
    p.owners_[i] = OwnerRecord{kNone, 0, kNone, 0, 0};
  }
  for (uint32_t i = 0; i < o->max_levels; ++i) {
    p.levels_[i] = LevelRecord{0, i + 1 < o->max_levels ? i + 1 : kNone, kNone, kNone};
  }
  for (uint32_t i = 0; i < o->max_holds; ++i) {
    p.holds_[i] = HoldEntry{kNone, kNone, 0, kNone, i + 1 < o->max_holds ? i + 1 : kNone, 0};
  }
  return core;
}

Status PoolCore::validate(const void* memory, size_t bytes) {
  if (memory == nullptr || bytes < sizeof(ArenaHeader))
    return Status(ErrorCode::kInvalidArgument, "arena too small for its header");
  const auto* h = static_cast<const ArenaHeader*>(memory);
  if (h->magic != kArenaMagic)
    return Status(ErrorCode::kVersionMismatch, "pool arena has a bad magic number");
  if (h->version != kArenaVersion)
    return Status(ErrorCode::kVersionMismatch, "pool arena version " + std::to_string(h->version) +
                                                   ", expected " + std::to_string(kArenaVersion));
  PoolCoreConfig c{h->num_blocks, h->max_owners, h->max_holds};
  auto o = compute_offsets(c);
  if (!o)
    return Status(ErrorCode::kVersionMismatch,
                  "pool arena header field num_blocks, max_owners or max_holds is out of range: " +
                      o.status().message());
  // Every field against what the three sizes make it: a reader indexes with all of them.
  const struct {
    const char* name;
    uint64_t got, want;
  } fields[] = {
      {"max_holds", h->max_holds, o->max_holds},
      {"table_capacity", h->table_capacity, o->table_capacity},
      {"hold_table_capacity", h->hold_table_capacity, o->hold_table_capacity},
      {"max_levels", h->max_levels, o->max_levels},
      {"level_table_capacity", h->level_table_capacity, o->level_table_capacity},
      {"off_blocks", h->off_blocks, o->blocks},
      {"off_table", h->off_table, o->table},
      {"off_levels", h->off_levels, o->levels},
      {"off_level_heap", h->off_level_heap, o->level_heap},
      {"off_level_table", h->off_level_table, o->level_table},
      {"off_owners", h->off_owners, o->owners},
      {"off_holds", h->off_holds, o->holds},
      {"off_hold_table", h->off_hold_table, o->hold_table},
      {"off_checksums", h->off_checksums, o->checksums},
      {"total_bytes", h->total_bytes, o->total},
  };
  for (const auto& f : fields)
    if (f.got != f.want)
      return Status(ErrorCode::kVersionMismatch,
                    std::string("pool arena header field ") + f.name + " is " +
                        std::to_string(f.got) + ", its num_blocks " +
                        std::to_string(h->num_blocks) + ", max_owners " +
                        std::to_string(h->max_owners) + " and max_holds " +
                        std::to_string(h->max_holds) + " make it " + std::to_string(f.want));
  // Ticks grow by one per pool call: one near the top would wrap the order of eviction.
  if (h->tick >= (uint64_t{1} << 62))
    return Status(ErrorCode::kVersionMismatch, "pool arena header field tick is " +
                                                   std::to_string(h->tick) +
                                                   ", beyond what any writer reaches");
  if (bytes < o->total)
    return Status(ErrorCode::kVersionMismatch, "pool arena of " + std::to_string(bytes) +
                                                   " bytes is smaller than its total_bytes " +
                                                   std::to_string(o->total));
  return Status::ok();
}

Result<PoolCore> PoolCore::attach(void* memory, size_t bytes, uint32_t pool_index,
                                  std::string name) {
  KVPOOL_RETURN_IF_ERROR(validate(memory, bytes));
  auto* h = static_cast<ArenaHeader*>(memory);
  // Valid: validate() computed the same offsets from the same header.
  auto o = compute_offsets(PoolCoreConfig{h->num_blocks, h->max_owners, h->max_holds});
  PoolCore p;
  auto* base = static_cast<char*>(memory);
  p.header_ = h;
  p.blocks_ = reinterpret_cast<BlockMeta*>(base + o->blocks);
  p.levels_ = reinterpret_cast<LevelRecord*>(base + o->levels);
  p.level_heap_ = reinterpret_cast<uint32_t*>(base + o->level_heap);
  p.level_table_ =
      FlatTable(reinterpret_cast<TableEntry*>(base + o->level_table), o->level_table_capacity);
  p.owners_ = reinterpret_cast<OwnerRecord*>(base + o->owners);
  p.holds_ = reinterpret_cast<HoldEntry*>(base + o->holds);
  p.checksums_ = reinterpret_cast<uint64_t*>(base + o->checksums);
  p.table_ = FlatTable(reinterpret_cast<TableEntry*>(base + o->table), o->table_capacity);
  p.hold_table_ =
      FlatTable(reinterpret_cast<TableEntry*>(base + o->hold_table), o->hold_table_capacity);
  p.pool_index_ = pool_index;
  p.name_ = std::move(name);
  return p;
}

// ---- free FIFO ----------------------------------------------------------------------

void PoolCore::free_push(uint32_t id) {
  BlockMeta& b = blocks_[id];
  b.state = static_cast<uint8_t>(BlockStateCode::kFree);
  b.flags = 0;
  b.next = kNone;
  b.prev = kNone;
  if (header_->free_tail == kNone) {
    header_->free_head = id;
  } else {
    blocks_[header_->free_tail].next = id;
  }
  header_->free_tail = id;
  bump(header_->stats.free_blocks, 1);
}

uint32_t PoolCore::free_pop() {
  uint32_t id = header_->free_head;
  header_->free_head = blocks_[id].next;
  if (header_->free_head == kNone) header_->free_tail = kNone;
  bump(header_->stats.free_blocks, -1);
  return id;
}

// ---- owner's mutable list -------------------------------------------------------------

void PoolCore::owner_mutable_push(uint32_t owner, uint32_t id) {
  OwnerRecord& o = owners_[owner];
  BlockMeta& b = blocks_[id];
  b.state = static_cast<uint8_t>(BlockStateCode::kMutable);
  b.owner = owner;
  b.prev = kNone;
  b.next = o.mutable_head;
  if (o.mutable_head != kNone) blocks_[o.mutable_head].prev = id;
  o.mutable_head = id;
  ++o.mutable_count;
  bump(header_->stats.mutable_blocks, 1);
}

void PoolCore::owner_mutable_remove(uint32_t owner, uint32_t id) {
  OwnerRecord& o = owners_[owner];
  BlockMeta& b = blocks_[id];
  if (b.prev != kNone) {
    blocks_[b.prev].next = b.next;
  } else {
    o.mutable_head = b.next;
  }
  if (b.next != kNone) blocks_[b.next].prev = b.prev;
  b.prev = kNone;
  b.next = kNone;
  --o.mutable_count;
  bump(header_->stats.mutable_blocks, -1);
}

void PoolCore::recycle(uint32_t owner, uint32_t id) {
  owner_mutable_remove(owner, id);
  free_push(id);
}

// ---- holds ----------------------------------------------------------------------------

uint32_t PoolCore::holds_of(uint32_t owner, uint32_t id) const {
  uint32_t h = hold_table_.find(hold_key(owner, id));
  return h == kNone ? 0 : holds_[h].count;
}

bool PoolCore::add_hold(uint32_t owner, uint32_t id) {
  OwnerRecord& o = owners_[owner];
  uint64_t key = hold_key(owner, id);
  uint32_t h = hold_table_.find(key);
  if (h == kNone) {
    h = header_->hold_free_head;
    if (h == kNone) return false;  // callers check capacity first; defensive
    header_->hold_free_head = holds_[h].next;
    HoldEntry& e = holds_[h];
    e = HoldEntry{id, owner, 0, kNone, o.hold_head, 0};
    if (o.hold_head != kNone) holds_[o.hold_head].prev = h;
    o.hold_head = h;
    ++o.hold_entries;
    hold_table_.insert(key, h);
    bump(header_->stats.holds_used, 1);
  }
  ++holds_[h].count;
  ++o.hold_refs;
  return true;
}

bool PoolCore::drop_hold(uint32_t owner, uint32_t id) { return drop_holds(owner, id, false); }

void PoolCore::drop_hold_all(uint32_t owner, uint32_t id) { (void)drop_holds(owner, id, true); }

bool PoolCore::drop_holds(uint32_t owner, uint32_t id, bool all) {
  uint64_t key = hold_key(owner, id);
  uint32_t h = hold_table_.find(key);
  if (h == kNone) return false;
  OwnerRecord& o = owners_[owner];
  HoldEntry& e = holds_[h];
  const uint32_t dropped = all ? e.count : 1;
  o.hold_refs -= dropped;
  e.count -= dropped;
  if (e.count > 0) return true;
  if (e.prev != kNone) {
    holds_[e.prev].next = e.next;
  } else {
    o.hold_head = e.next;
  }
  if (e.next != kNone) holds_[e.next].prev = e.prev;
  --o.hold_entries;
  hold_table_.erase(key);
  e = HoldEntry{kNone, kNone, 0, kNone, header_->hold_free_head, 0};
  header_->hold_free_head = h;
  bump(header_->stats.holds_used, -1);
  return true;
}

// ---- inactive blocks: a FIFO per priority level, levels in a min-heap ------------------

void PoolCore::level_sift_up(uint32_t pos) {
  uint32_t lv = level_heap_[pos];
  while (pos > 0) {
    uint32_t parent = (pos - 1) / 2;
    if (levels_[level_heap_[parent]].priority <= levels_[lv].priority) break;
    level_heap_[pos] = level_heap_[parent];
    levels_[level_heap_[pos]].heap_pos = pos;
    pos = parent;
  }
  level_heap_[pos] = lv;
  levels_[lv].heap_pos = pos;
}

void PoolCore::level_sift_down(uint32_t pos) {
  uint32_t n = header_->level_count;
  uint32_t lv = level_heap_[pos];
  while (true) {
    uint32_t child = 2 * pos + 1;
    if (child >= n) break;
    if (child + 1 < n &&
        levels_[level_heap_[child + 1]].priority < levels_[level_heap_[child]].priority)
      ++child;
    if (levels_[lv].priority <= levels_[level_heap_[child]].priority) break;
    level_heap_[pos] = level_heap_[child];
    levels_[level_heap_[pos]].heap_pos = pos;
    pos = child;
  }
  level_heap_[pos] = lv;
  levels_[lv].heap_pos = pos;
}

uint32_t PoolCore::level_for(uint32_t priority) {
  uint32_t lv = level_table_.find(priority);
  if (lv != kNone) return lv;
  lv = header_->level_free_head;
  if (lv == kNone) return level_heap_[0];  // see kMaxLevels
  header_->level_free_head = levels_[lv].head;
  levels_[lv] = LevelRecord{priority, kNone, kNone, header_->level_count};
  level_heap_[header_->level_count++] = lv;
  level_sift_up(levels_[lv].heap_pos);
  level_table_.insert(priority, lv);
  return lv;
}

void PoolCore::level_release(uint32_t lv) {
  uint32_t pos = levels_[lv].heap_pos;
  uint32_t last = --header_->level_count;
  if (pos != last) {
    // The last level fills the hole; it belongs either below or above it.
    uint32_t moved = level_heap_[last];
    level_heap_[pos] = moved;
    levels_[moved].heap_pos = pos;
    level_sift_down(pos);
    if (levels_[moved].heap_pos == pos) level_sift_up(pos);
  }
  level_table_.erase(levels_[lv].priority);
  levels_[lv] = LevelRecord{0, header_->level_free_head, kNone, kNone};
  header_->level_free_head = lv;
}

void PoolCore::inactive_push(uint32_t id) {
  BlockMeta& b = blocks_[id];
  uint32_t lv = level_for(b.priority);
  LevelRecord& L = levels_[lv];
  b.state = static_cast<uint8_t>(BlockStateCode::kInactive);
  b.level = lv;
  b.next = kNone;
  b.prev = L.tail;
  if (L.tail != kNone) {
    blocks_[L.tail].next = id;
  } else {
    L.head = id;
  }
  L.tail = id;
  bump(header_->stats.inactive_blocks, 1);
}

void PoolCore::inactive_remove(uint32_t id) {
  BlockMeta& b = blocks_[id];
  uint32_t lv = b.level;
  LevelRecord& L = levels_[lv];
  if (b.prev != kNone) {
    blocks_[b.prev].next = b.next;
  } else {
    L.head = b.next;
  }
  if (b.next != kNone) {
    blocks_[b.next].prev = b.prev;
  } else {
    L.tail = b.prev;
  }
  b.prev = kNone;
  b.next = kNone;
  if (L.head == kNone) level_release(lv);
  bump(header_->stats.inactive_blocks, -1);
}

uint32_t PoolCore::inactive_pop() {
  uint32_t id = levels_[level_heap_[0]].head;
  inactive_remove(id);
  return id;
}

// ---- references -------------------------------------------------------------------------

void PoolCore::take_reference(uint32_t owner, uint32_t id) {
  BlockMeta& b = blocks_[id];
  if (b.state == static_cast<uint8_t>(BlockStateCode::kInactive)) {
    inactive_remove(id);
    b.state = static_cast<uint8_t>(BlockStateCode::kActive);
    b.refcount = 0;
    bump(header_->stats.active_blocks, 1);
  }
  ++b.refcount;
  b.acquired_tick = ++header_->tick;
  add_hold(owner, id);
}

void PoolCore::drop_reference(uint32_t id, uint32_t count) {
  BlockMeta& b = blocks_[id];
  b.refcount -= count;  // count <= refcount: the holds it drops were counted in it
  if (b.refcount > 0) return;
  bump(header_->stats.active_blocks, -1);
  if (b.flags & kFlagPoisoned) {
    free_push(id);  // its bytes are bad: nothing may find it again (free_push clears the flag)
    return;
  }
  b.returned_tick = ++header_->tick;
  inactive_push(id);
}

// ---- validation -------------------------------------------------------------------------

Status PoolCore::check_owner(uint32_t owner) const {
  if (owner >= header_->max_owners)
    return Status(ErrorCode::kInvalidArgument, "owner " + std::to_string(owner) +
                                                   " out of range (max_owners " +
                                                   std::to_string(header_->max_owners) + ")");
  return Status::ok();
}

Status PoolCore::set_quota(const OwnerQuota& quota) {
  if (quota.max_refs_per_block == 0)
    return Status(ErrorCode::kInvalidArgument, "max_refs_per_block must be at least 1");
  if (uint64_t{quota.max_refs_per_block} * header_->max_owners >= (uint64_t{1} << 32))
    return Status(ErrorCode::kInvalidArgument,
                  "max_refs_per_block " + std::to_string(quota.max_refs_per_block) + " x " +
                      std::to_string(header_->max_owners) +
                      " clients could overflow a 32-bit reference count");
  quota_ = quota;
  return Status::ok();
}

Status PoolCore::check_block_quota(uint32_t owner, uint32_t id, uint32_t extra) const {
  const uint64_t held = id == kNone ? 0 : holds_of(owner, id);  // kNone: a block not yet registered
  if (held + extra <= quota_.max_refs_per_block) return Status::ok();
  return Status(ErrorCode::kQuotaExceeded,
                "pool '" + name_ + "': this client would hold more than " +
                    std::to_string(quota_.max_refs_per_block) + " references on block " +
                    std::to_string(id) + " (max_refs_per_block)");
}

// A handle whose generation is not the block's. Under a daemon (generation tag set) one
// whose tag is neither this daemon's nor the block's was issued by another kvpoold: a
// previous daemon of this instance, or another instance whose pool looks the same.
Status PoolCore::stale_handle(BlockRef ref, uint32_t current) const {
  const uint32_t tag = header_->generation_tag;
  const uint32_t issuer = generation_tag_of(ref.generation);
  if (tag != 0 && issuer != tag && issuer != generation_tag_of(current))
    return Status(ErrorCode::kInvalidHandle,
                  "handle from another kvpoold: " + handle_text(ref) + " carries generation tag " +
                      std::to_string(issuer) + ", but this kvpoold issues tag " +
                      std::to_string(tag) + " in pool '" + name_ +
                      "' (the handle was issued by a daemon that has since restarted, or by "
                      "another instance); allocate or match the block again");
  return Status(ErrorCode::kInvalidHandle, "stale handle: " + handle_text(ref) +
                                               " was reused, it is at generation " +
                                               std::to_string(current));
}

void PoolCore::set_generation_tag(uint8_t tag) { header_->generation_tag = tag; }

Status PoolCore::check_mutable_handle(uint32_t owner, BlockRef ref) const {
  if (ref.id >= header_->num_blocks)
    return Status(ErrorCode::kInvalidHandle, handle_text(ref) + " does not exist in pool '" +
                                                 name_ + "' (" +
                                                 std::to_string(header_->num_blocks) + " blocks)");
  const BlockMeta& b = blocks_[ref.id];
  if (b.generation != ref.generation) return stale_handle(ref, b.generation);
  if (b.state != static_cast<uint8_t>(BlockStateCode::kMutable) || b.owner != owner)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(ref) + " is not a mutable block held by this client");
  return Status::ok();
}

// ---- operations -------------------------------------------------------------------------

Status PoolCore::allocate(uint32_t owner, uint32_t n, BlockRef* out) {
  WriteSection ws(header_->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  if (quota_.max_mutable_blocks != 0 &&
      uint64_t{owners_[owner].mutable_count} + n > quota_.max_mutable_blocks)
    return Status(ErrorCode::kQuotaExceeded,
                  "pool '" + name_ + "': this client holds " +
                      std::to_string(owners_[owner].mutable_count) + " mutable blocks, " +
                      std::to_string(n) + " more would pass its quota of " +
                      std::to_string(quota_.max_mutable_blocks) + " (max_mutable_blocks)");
  uint32_t free_n = header_->stats.free_blocks.load(std::memory_order_relaxed);
  uint64_t available =
      uint64_t{free_n} + header_->stats.inactive_blocks.load(std::memory_order_relaxed);
  if (n > available)
    return Status(ErrorCode::kNotEnoughBlocks,
                  "pool '" + name_ + "' has " + std::to_string(available) +
                      " free or evictable blocks, " + std::to_string(n) + " requested");
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t id;
    if (header_->free_head != kNone) {
      id = free_pop();
    } else {
      id = inactive_pop();
      BlockMeta& b = blocks_[id];
      table_.erase(b.sequence_hash);
      --header_->registered;
      bump(header_->stats.evictions, 1);
      if (sink_) sink_->on_removed(pool_index_, b.sequence_hash);
    }
    BlockMeta& b = blocks_[id];
    b.generation = next_generation(b.generation, header_->generation_tag);
    b.flags = 0;
    b.priority = 0;
    checksums_[id] = kNoChecksum;  // the new owner's bytes have none until it registers
    b.acquired_tick = ++header_->tick;
    owner_mutable_push(owner, id);
    out[i] = BlockRef{id, b.generation};
  }
  bump(header_->stats.allocations, n);
  return Status::ok();
}

Status PoolCore::register_blocks(uint32_t owner, std::span<const RegisterItem> items, BlockRef* out,
                                 const RegisterTokens& tokens) {
  WriteSection ws(header_->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  // Validate the whole batch first: a bad item changes nothing.
  Status bad;
  size_t marked = 0;
  for (; marked < items.size(); ++marked) {
    const RegisterItem& it = items[marked];
    bad = check_mutable_handle(owner, it.block);
    if (!bad.is_ok()) break;
    if (it.has_parent > 1) {
      bad = Status(ErrorCode::kInvalidArgument, "has_parent must be 0 or 1");
      break;
    }
    BlockMeta& b = blocks_[it.block.id];
    if (b.flags & kFlagScratch) {
      bad = Status(ErrorCode::kInvalidArgument,
                   handle_text(it.block) + " appears twice in one register call");
      break;
    }
    b.flags |= kFlagScratch;
  }
  for (size_t i = 0; i < marked; ++i) blocks_[items[i].block.id].flags &= ~kFlagScratch;
  if (!bad.is_ok()) {
    bump(header_->stats.rejected_handles, 1);
    return bad;
  }
  if (items.size() > holds_free())
    return Status(ErrorCode::kResourceExhausted,
                  "pool '" + name_ + "' has " + std::to_string(holds_free()) +
                      " reference slots left, register of " + std::to_string(items.size()) +
                      " needs that many (raise max_holds)");
  KVPOOL_RETURN_IF_ERROR(check_register_quota(owner, items));

  stored_scratch_.clear();
  for (size_t i = 0; i < items.size(); ++i) {
    const RegisterItem& it = items[i];
    uint32_t existing = table_.find(it.sequence_hash);
    if (existing != kNone) {
      // Active or inactive hit: share the registered block, recycle the caller's.
      take_reference(owner, existing);
      recycle(owner, it.block.id);
      bump(header_->stats.register_dedups, 1);
      out[i] = BlockRef{existing, blocks_[existing].generation};
      continue;
    }
    uint32_t id = it.block.id;
    owner_mutable_remove(owner, id);
    BlockMeta& b = blocks_[id];
    b.sequence_hash = it.sequence_hash;
    b.block_hash = it.block_hash;
    b.parent_hash = it.has_parent ? it.parent_hash : 0;
    b.flags = it.has_parent ? kFlagHasParent : 0;
    b.priority = it.priority;
    b.state = static_cast<uint8_t>(BlockStateCode::kActive);
    b.refcount = 1;
    checksums_[id] = it.checksum;
    b.acquired_tick = ++header_->tick;
    table_.insert(it.sequence_hash, id);
    ++header_->registered;
    add_hold(owner, id);
    bump(header_->stats.active_blocks, 1);
    bump(header_->stats.registrations, 1);
    stored_scratch_.push_back(StoredBlock{it.sequence_hash, it.block_hash, b.parent_hash,
                                          it.priority, it.has_parent != 0, tokens.of(i)});
    out[i] = BlockRef{id, b.generation};
  }
  if (sink_ && !stored_scratch_.empty()) sink_->on_stored(pool_index_, stored_scratch_);
  return Status::ok();
}

// Quotas of a register call, all or nothing: priority cap, references in total, and
// references per block (this call's items counted per hash: the first of a new hash
// registers the caller's block, each further one shares it).
Status PoolCore::check_register_quota(uint32_t owner, std::span<const RegisterItem> items) {
  for (const RegisterItem& it : items) {
    if (it.priority > quota_.max_priority)
      return Status(ErrorCode::kQuotaExceeded,
                    "pool '" + name_ + "': priority " + std::to_string(it.priority) +
                        " is above this instance's cap of " + std::to_string(quota_.max_priority) +
                        " (max_priority)");
  }
  const OwnerRecord& o = owners_[owner];
  if (quota_.max_references != 0 && o.hold_refs + items.size() > quota_.max_references)
    return Status(ErrorCode::kQuotaExceeded,
                  "pool '" + name_ + "': this client holds " + std::to_string(o.hold_refs) +
                      " references, " + std::to_string(items.size()) +
                      " more would pass its quota of " + std::to_string(quota_.max_references) +
                      " (max_references)");
  // Cheap test first; the exact count only for a call that could come near the cap.
  bool near = items.size() > quota_.max_refs_per_block;
  for (size_t i = 0; i < items.size() && !near; ++i) {
    uint32_t ex = table_.find(items[i].sequence_hash);
    near = ex != kNone && holds_of(owner, ex) + items.size() > quota_.max_refs_per_block;
  }
  if (!near) return Status::ok();
  std::unordered_map<uint64_t, uint32_t> per_hash;
  for (const RegisterItem& it : items) ++per_hash[it.sequence_hash];
  for (const auto& [hash, count] : per_hash) {
    uint32_t ex = table_.find(hash);
    KVPOOL_RETURN_IF_ERROR(check_block_quota(owner, ex == kNone ? kNone : ex, count));
  }
  return Status::ok();
}

Result<BlockRef> PoolCore::hold_registered(uint32_t owner, uint64_t sequence_hash) {
  WriteSection ws(header_->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  if (holds_free() == 0)
    return Status(ErrorCode::kResourceExhausted,
                  "pool '" + name_ + "' has no reference slot left (raise max_holds)");
  const uint32_t id = table_.find(sequence_hash);
  if (id == kNone) return Status(ErrorCode::kNotFound, "block is not registered");
  const uint64_t acquired = blocks_[id].acquired_tick;
  take_reference(owner, id);
  blocks_[id].acquired_tick = acquired;  // a daemon hold is no use by a client
  return BlockRef{id, blocks_[id].generation};
}

Result<uint32_t> PoolCore::match(uint32_t owner, std::span<const uint64_t> hashes, BlockRef* out) {
  WriteSection ws(header_->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  if (hashes.size() > holds_free())
    return Status(ErrorCode::kResourceExhausted,
                  "pool '" + name_ + "' has " + std::to_string(holds_free()) +
                      " reference slots left, match of " + std::to_string(hashes.size()) +
                      " may need that many (raise max_holds)");
  if (quota_.max_references != 0 &&
      owners_[owner].hold_refs + hashes.size() > quota_.max_references)
    return Status(ErrorCode::kQuotaExceeded,
                  "pool '" + name_ + "': this client holds " +
                      std::to_string(owners_[owner].hold_refs) + " references, a match of " +
                      std::to_string(hashes.size()) + " could pass its quota of " +
                      std::to_string(quota_.max_references) + " (max_references)");
  // Three passes over chunks of 64 so the cache misses of a whole chunk overlap: prefetch
  // the registry slots, then look up and prefetch each hit's metadata and hold slot, then
  // take the references. Roughly halves the time of a 64-hash match on a large pool.
  constexpr size_t kChunk = 64;
  uint32_t ids[kChunk];
  uint32_t n = 0;
  for (size_t base = 0; base < hashes.size(); base += kChunk) {
    size_t len = std::min(kChunk, hashes.size() - base);
    for (size_t i = 0; i < len; ++i) table_.prefetch(hashes[base + i]);
    size_t hit = 0;
    for (; hit < len; ++hit) {
      uint32_t id = table_.find(hashes[base + hit]);
      if (id == kNone) break;
      ids[hit] = id;
      __builtin_prefetch(&blocks_[id], 1);
      hold_table_.prefetch(hold_key(owner, id));
    }
    for (size_t i = 0; i < hit; ++i) {
      if (Status q = check_block_quota(owner, ids[i], 1); !q.is_ok()) {
        // Only a client that repeats hashes gets here: give back what this call took.
        for (uint32_t k = n; k-- > 0;) {
          drop_hold(owner, out[k].id);
          drop_reference(out[k].id);
        }
        return q;
      }
      take_reference(owner, ids[i]);
      out[n++] = BlockRef{ids[i], blocks_[ids[i]].generation};
    }
    if (hit < len) break;
  }
  bump(header_->stats.match_queries, hashes.size());
  bump(header_->stats.match_hits, n);
  return n;
}

// Releases are fire-and-forget, and a hostile client can send millions of bad handles:
// a rejection is counted with no allocation; only the first one's message is built.
Status PoolCore::release_mutable(uint32_t owner, std::span<const BlockRef> blocks,
                                 uint32_t* rejected) {
  WriteSection ws(header_->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  uint32_t bad = 0;
  const BlockRef* first_bad = nullptr;
  for (const BlockRef& r : blocks) {
    const bool ok = r.id < header_->num_blocks && blocks_[r.id].generation == r.generation &&
                    blocks_[r.id].state == static_cast<uint8_t>(BlockStateCode::kMutable) &&
                    blocks_[r.id].owner == owner;
    if (!ok) {
      if (bad++ == 0) first_bad = &r;
      continue;
    }
    recycle(owner, r.id);
  }
  if (bad == 0) return Status::ok();
  bump(header_->stats.rejected_handles, bad);
  if (rejected) *rejected += bad;
  return check_mutable_handle(owner, *first_bad);  // the first rejection, explained
}

Status PoolCore::release_immutable(uint32_t owner, std::span<const BlockRef> blocks,
                                   uint32_t* rejected) {
  WriteSection ws(header_->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  uint32_t bad = 0;
  BlockRef first_bad{};
  bool first_dropped = false;  // first_bad named a real active block this owner did not hold
  for (size_t k = blocks.size(); k-- > 0;) {
    BlockRef r = blocks[k];
    const bool named = r.id < header_->num_blocks && blocks_[r.id].generation == r.generation &&
                       blocks_[r.id].state == static_cast<uint8_t>(BlockStateCode::kActive);
    if (!named || !drop_hold(owner, r.id)) {
      if (bad++ == 0) {
        first_bad = r;
        first_dropped = named;
      }
      continue;
    }
    drop_reference(r.id);
    bump(header_->stats.released_refs, 1);
  }
  if (bad == 0) return Status::ok();
  bump(header_->stats.rejected_handles, bad);
  if (rejected) *rejected += bad;
  const BlockRef r = first_bad;
  if (r.id >= header_->num_blocks)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(r) + " does not exist in pool '" + name_ + "'");
  if (!first_dropped && blocks_[r.id].generation != r.generation)
    return stale_handle(r, blocks_[r.id].generation);
  return Status(ErrorCode::kInvalidHandle,
                handle_text(r) + " is not an immutable block held by this client");
}

uint32_t PoolCore::release_owner(uint32_t owner) {
  WriteSection ws(header_->stats.write_seq);
  if (!check_owner(owner).is_ok()) return 0;
  OwnerRecord& o = owners_[owner];
  uint32_t returned = 0;
  while (o.mutable_head != kNone) {
    recycle(owner, o.mutable_head);
    ++returned;
  }
  while (o.hold_head != kNone) {
    HoldEntry& e = holds_[o.hold_head];
    uint32_t id = e.block;
    uint32_t count = e.count;
    // One step per hold record, not per reference: a client's many references on one
    // block go in one subtraction.
    drop_hold_all(owner, id);
    drop_reference(id, count);
    bump(header_->stats.released_refs, count);
    ++returned;
  }
  return returned;
}

// ---- reattach after a restart ----------------------------------------------------------------

Status PoolCore::hand_over(uint32_t keeper, uint32_t to, BlockRef ref, uint32_t references) {
  WriteSection ws(header_->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(keeper));
  KVPOOL_RETURN_IF_ERROR(check_owner(to));
  if (ref.id >= header_->num_blocks)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(ref) + " does not exist in pool '" + name_ + "'");
  BlockMeta& b = blocks_[ref.id];
  if (b.generation != ref.generation) return stale_handle(ref, b.generation);
  if (references == 0) {
    if (b.state != static_cast<uint8_t>(BlockStateCode::kMutable) || b.owner != keeper)
      return Status(ErrorCode::kInvalidHandle,
                    handle_text(ref) + " is not a mutable block kept for a reattaching client");
    owner_mutable_remove(keeper, ref.id);
    owner_mutable_push(to, ref.id);
    return Status::ok();
  }
  if (b.state != static_cast<uint8_t>(BlockStateCode::kActive) || holds_of(keeper, ref.id) == 0)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(ref) + " is not a registered block kept for a reattaching client");
  if (holds_of(to, ref.id) == 0 && holds_free() == 0)
    return Status(ErrorCode::kResourceExhausted,
                  "pool '" + name_ + "' has no reference slot left (raise max_holds)");
  for (uint32_t k = 0; k < references; ++k) add_hold(to, ref.id);
  b.refcount += references;
  return Status::ok();
}

bool PoolCore::release_kept(uint32_t keeper, uint32_t id) {
  if (!check_owner(keeper).is_ok() || id >= header_->num_blocks) return false;
  const BlockMeta& b = blocks_[id];
  const BlockRef ref{id, b.generation};
  if (b.state == static_cast<uint8_t>(BlockStateCode::kMutable) && b.owner == keeper)
    return release_mutable(keeper, {&ref, 1}).is_ok();
  if (b.state == static_cast<uint8_t>(BlockStateCode::kActive) && holds_of(keeper, id) > 0)
    return release_immutable(keeper, {&ref, 1}).is_ok();
  return false;
}

// ---- per-block checksums -------------------------------------------------------------------

bool PoolCore::registered(uint32_t id) const {
  const BlockMeta& b = blocks_[id];
  return (b.state == static_cast<uint8_t>(BlockStateCode::kActive) ||
          b.state == static_cast<uint8_t>(BlockStateCode::kInactive)) &&
         (b.flags & kFlagPoisoned) == 0;
}

Status PoolCore::check_held(uint32_t owner, BlockRef ref) const {
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  if (ref.id >= header_->num_blocks)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(ref) + " does not exist in pool '" + name_ + "'");
  const BlockMeta& b = blocks_[ref.id];
  if (b.generation != ref.generation) return stale_handle(ref, b.generation);
  if (b.state != static_cast<uint8_t>(BlockStateCode::kActive) || holds_of(owner, ref.id) == 0)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(ref) + " is not an immutable block held by this client");
  return Status::ok();
}

proto::ChecksumOutcome PoolCore::record_checksum(uint32_t id, uint64_t computed) {
  WriteSection ws(header_->stats.write_seq);
  bump(header_->stats.checksum_verified, 1);
  if (computed == checksums_[id]) return proto::ChecksumOutcome::kOk;
  bump(header_->stats.checksum_mismatches, 1);
  poison(id);
  return proto::ChecksumOutcome::kMismatch;
}

void PoolCore::poison(uint32_t id) {
  BlockMeta& b = blocks_[id];
  // Out of the registry first, as an eviction: no match or register can return it again,
  // and subscribers hear that the hash is gone.
  table_.erase(b.sequence_hash);
  --header_->registered;
  if (sink_) sink_->on_removed(pool_index_, b.sequence_hash);
  if (b.state == static_cast<uint8_t>(BlockStateCode::kInactive)) {
    inactive_remove(id);
    free_push(id);
    return;
  }
  // Active: others read it now. Taking it from them would make their handles fail at
  // release; they keep it until their last reference goes (drop_reference frees it).
  b.flags |= kFlagPoisoned;
}

PoolCounts PoolCore::counts() const {
  const PoolStats& s = header_->stats;
  return PoolCounts{header_->num_blocks, s.free_blocks.load(std::memory_order_relaxed),
                    s.mutable_blocks.load(std::memory_order_relaxed),
                    s.active_blocks.load(std::memory_order_relaxed),
                    s.inactive_blocks.load(std::memory_order_relaxed)};
}

Status PoolCore::check_invariants() const {
  auto fail = [](std::string m) { return Status(ErrorCode::kInternal, std::move(m)); };
  const uint32_t n = header_->num_blocks;
  // First: every look-up below must end (a probe stops at an empty slot).
  KVPOOL_RETURN_IF_ERROR(arena_tables_have_room(*header_));
  uint32_t by_state[4] = {0, 0, 0, 0};
  for (uint32_t i = 0; i < n; ++i) {
    uint8_t st = blocks_[i].state;
    if (st > 3) return fail("block " + std::to_string(i) + " has state " + std::to_string(st));
    ++by_state[st];
  }
  PoolCounts c = counts();
  if (c.free + c.mutable_blocks + c.active + c.inactive != n)
    return fail("counts do not add up: free " + std::to_string(c.free) + " + mutable " +
                std::to_string(c.mutable_blocks) + " + active " + std::to_string(c.active) +
                " + inactive " + std::to_string(c.inactive) + " != total " + std::to_string(n));
  if (by_state[0] != c.free || by_state[1] != c.mutable_blocks || by_state[2] != c.active ||
      by_state[3] != c.inactive)
    return fail("state counters disagree with block states");
  // Free FIFO.
  uint32_t walked = 0;
  for (uint32_t id = header_->free_head; id != kNone; id = blocks_[id].next) {
    if (id >= n || blocks_[id].state != 0 || ++walked > n) return fail("free list is corrupt");
  }
  if (walked != c.free) return fail("free list length differs from free count");
  // Inactive levels: heap-ordered by priority, FIFO in return order, counts add up.
  uint32_t inactive_walked = 0;
  if (header_->level_count > header_->max_levels)
    return fail("level_count " + std::to_string(header_->level_count) + " exceeds max_levels " +
                std::to_string(header_->max_levels));
  for (uint32_t p = 0; p < header_->level_count; ++p) {
    uint32_t lv = level_heap_[p];
    if (lv >= header_->max_levels || levels_[lv].heap_pos != p)
      return fail("level heap slot " + std::to_string(p) + " is corrupt");
    if (p > 0 && levels_[lv].priority < levels_[level_heap_[(p - 1) / 2]].priority)
      return fail("level heap order broken");
    if (levels_[lv].head == kNone) return fail("empty level left in the heap");
    uint64_t last_tick = 0;
    uint32_t prev = kNone;
    for (uint32_t id = levels_[lv].head; id != kNone; id = blocks_[id].next) {
      if (id >= n)
        return fail("inactive list of priority " + std::to_string(levels_[lv].priority) +
                    " names block " + std::to_string(id));
      const BlockMeta& b = blocks_[id];
      if (b.state != 3 || b.level != lv || b.prev != prev || ++inactive_walked > n)
        return fail("inactive list of priority " + std::to_string(levels_[lv].priority) +
                    " is corrupt at block " + std::to_string(id));
      if (b.returned_tick <= last_tick) return fail("inactive list out of return order");
      last_tick = b.returned_tick;
      prev = id;
    }
    if (levels_[lv].tail != prev) return fail("level tail is wrong");
  }
  if (inactive_walked != c.inactive) return fail("inactive lists differ from inactive count");
  // Registry: every registered block is findable by its hash, and the count matches; a
  // poisoned block (active only) is not in it.
  uint32_t poisoned_blocks = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t st = blocks_[i].state;
    const bool bad = (blocks_[i].flags & kFlagPoisoned) != 0;
    if (bad && st != 2)
      return fail("poisoned block " + std::to_string(i) + " is not active (state " +
                  std::to_string(st) + ")");
    if (bad) {
      ++poisoned_blocks;
      if (table_.find(blocks_[i].sequence_hash) == i)
        return fail("poisoned block " + std::to_string(i) + " is still in the registry");
      continue;
    }
    if ((st == 2 || st == 3) && table_.find(blocks_[i].sequence_hash) != i)
      return fail("registered block " + std::to_string(i) + " is not in the registry");
  }
  if (header_->registered + poisoned_blocks != c.active + c.inactive)
    return fail("registry size differs from active + inactive (less poisoned)");
  // Holds: per block the counts sum to its refcount; per owner lists are consistent.
  std::vector<uint64_t> held(n, 0);
  uint64_t entries = 0;
  for (uint32_t ow = 0; ow < header_->max_owners; ++ow) {
    const OwnerRecord& o = owners_[ow];
    uint32_t m = 0;
    for (uint32_t id = o.mutable_head; id != kNone; id = blocks_[id].next) {
      if (id >= n || blocks_[id].state != 1 || blocks_[id].owner != ow || ++m > n)
        return fail("mutable list of owner " + std::to_string(ow) + " is corrupt");
    }
    if (m != o.mutable_count) return fail("mutable count of owner " + std::to_string(ow));
    uint32_t e = 0;
    uint64_t refs = 0;
    for (uint32_t h = o.hold_head; h != kNone; h = holds_[h].next) {
      if (h >= header_->max_holds || ++e > header_->max_holds)  // checked before holds_[h]
        return fail("hold list of owner " + std::to_string(ow) + " is corrupt");
      const HoldEntry& he = holds_[h];
      if (he.owner != ow || he.block >= n || he.count == 0 || blocks_[he.block].state != 2)
        return fail("hold entry " + std::to_string(h) + " is corrupt");
      if (hold_table_.find(hold_key(ow, he.block)) != h) return fail("hold table is corrupt");
      held[he.block] += he.count;
      refs += he.count;
    }
    if (e != o.hold_entries || refs != o.hold_refs)
      return fail("hold totals of owner " + std::to_string(ow) + " are wrong");
    entries += e;
  }
  if (entries != header_->stats.holds_used.load(std::memory_order_relaxed))
    return fail("holds_used differs from the entries in use");
  for (uint32_t i = 0; i < n; ++i) {
    if (blocks_[i].state == 2 && held[i] != blocks_[i].refcount)
      return fail("block " + std::to_string(i) + " refcount " +
                  std::to_string(blocks_[i].refcount) + " but holders hold " +
                  std::to_string(held[i]));
  }
  return Status::ok();
}

}  // namespace kvpool::pool
