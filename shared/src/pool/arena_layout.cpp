#include "kvpool/pool/arena_layout.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

namespace kvpool::pool {
namespace {

// Distinct priorities among inactive blocks at one time. Beyond it (only a client inventing
// priorities on purpose gets there) a block joins the lowest level: evicted earlier, never lost.
constexpr uint32_t kMaxLevels = 65536;

constexpr uint64_t align64(uint64_t v) { return (v + 63) & ~uint64_t{63}; }

Status check_sizes(const PoolCoreConfig& c) {
  if (c.num_blocks == 0) return Status(ErrorCode::kInvalidArgument, "num_blocks must be > 0");
  if (c.num_blocks > (1u << 30))
    return Status(ErrorCode::kInvalidArgument,
                  "num_blocks " + std::to_string(c.num_blocks) + " exceeds the limit of 2^30");
  if (c.max_owners == 0 || c.max_owners > (1u << 20))
    return Status(ErrorCode::kInvalidArgument,
                  "max_owners must be in [1, 2^20], got " + std::to_string(c.max_owners));
  return Status::ok();
}

// Places the next region of `count` elements of `size` bytes at `off`, 64-byte aligned.
uint64_t place(uint64_t& off, uint64_t count, size_t size) {
  const uint64_t at = off;
  off = align64(off + count * size);
  return at;
}

}  // namespace

Result<ArenaLayout> arena_layout(const PoolCoreConfig& c) {
  KVPOOL_RETURN_IF_ERROR(check_sizes(c));
  ArenaLayout o{};
  uint64_t holds = c.max_holds ? c.max_holds : uint64_t{2} * c.num_blocks + 64;
  if (holds > (1u << 30))
    return Status(ErrorCode::kInvalidArgument, "max_holds exceeds the limit of 2^30");
  o.max_holds = static_cast<uint32_t>(holds);
  o.table_capacity = std::bit_ceil(std::max<uint32_t>(16, 2 * c.num_blocks));
  o.hold_table_capacity = std::bit_ceil(std::max<uint32_t>(16, 2 * o.max_holds));
  o.max_levels = std::min<uint32_t>(c.num_blocks, kMaxLevels);
  o.level_table_capacity = std::bit_ceil(std::max<uint32_t>(16, 2 * o.max_levels));
  uint64_t off = align64(sizeof(ArenaHeader));
  o.blocks = place(off, c.num_blocks, sizeof(BlockMeta));
  o.table = place(off, o.table_capacity, sizeof(TableEntry));
  o.levels = place(off, o.max_levels, sizeof(LevelRecord));
  o.level_heap = place(off, o.max_levels, sizeof(uint32_t));
  o.level_table = place(off, o.level_table_capacity, sizeof(TableEntry));
  o.owners = place(off, c.max_owners, sizeof(OwnerRecord));
  o.holds = place(off, o.max_holds, sizeof(HoldEntry));
  o.hold_table = place(off, o.hold_table_capacity, sizeof(TableEntry));
  o.checksums = place(off, c.num_blocks, sizeof(uint64_t));
  o.total = off;
  return o;
}

Status validate_arena(const void* memory, size_t bytes) {
  if (memory == nullptr || bytes < sizeof(ArenaHeader))
    return Status(ErrorCode::kInvalidArgument, "arena too small for its header");
  const auto* h = static_cast<const ArenaHeader*>(memory);
  if (h->magic != kArenaMagic)
    return Status(ErrorCode::kVersionMismatch, "pool arena has a bad magic number");
  if (h->version != kArenaVersion)
    return Status(ErrorCode::kVersionMismatch, "pool arena version " + std::to_string(h->version) +
                                                   ", expected " + std::to_string(kArenaVersion));
  auto o = arena_layout(PoolCoreConfig{h->num_blocks, h->max_owners, h->max_holds});
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

namespace {

// The header's offsets were checked against its sizes (validate_arena or format_arena).
template <bool Const, typename Byte>
ArenaRegionsOf<Const> locate(Byte* base) {
  using R = ArenaRegionsOf<Const>;
  R r;
  r.header = reinterpret_cast<typename R::template Ptr<ArenaHeader>>(base);
  auto at = [&](uint64_t off) { return base + off; };
  r.blocks = reinterpret_cast<typename R::template Ptr<BlockMeta>>(at(r.header->off_blocks));
  r.table = reinterpret_cast<typename R::template Ptr<TableEntry>>(at(r.header->off_table));
  r.levels = reinterpret_cast<typename R::template Ptr<LevelRecord>>(at(r.header->off_levels));
  r.level_heap = reinterpret_cast<typename R::template Ptr<uint32_t>>(at(r.header->off_level_heap));
  r.level_table =
      reinterpret_cast<typename R::template Ptr<TableEntry>>(at(r.header->off_level_table));
  r.owners = reinterpret_cast<typename R::template Ptr<OwnerRecord>>(at(r.header->off_owners));
  r.holds = reinterpret_cast<typename R::template Ptr<HoldEntry>>(at(r.header->off_holds));
  r.hold_table =
      reinterpret_cast<typename R::template Ptr<TableEntry>>(at(r.header->off_hold_table));
  r.checksums = reinterpret_cast<typename R::template Ptr<uint64_t>>(at(r.header->off_checksums));
  return r;
}

}  // namespace

ArenaRegions locate_regions(void* memory) { return locate<false>(static_cast<char*>(memory)); }

ConstArenaRegions locate_regions(const void* memory) {
  return locate<true>(static_cast<const char*>(memory));
}

ConstArenaRegions as_const(const ArenaRegions& r) {
  return ConstArenaRegions{r.header,      r.blocks, r.table, r.levels,     r.level_heap,
                           r.level_table, r.owners, r.holds, r.hold_table, r.checksums};
}

ArenaRegions format_arena(void* memory, const PoolCoreConfig& config, const ArenaLayout& o) {
  std::memset(memory, 0, o.total);
  auto* h = new (memory) ArenaHeader{};
  h->magic = kArenaMagic;
  h->version = kArenaVersion;
  h->num_blocks = config.num_blocks;
  h->max_owners = config.max_owners;
  h->max_holds = o.max_holds;
  h->table_capacity = o.table_capacity;
  h->hold_table_capacity = o.hold_table_capacity;
  h->off_blocks = o.blocks;
  h->off_table = o.table;
  h->max_levels = o.max_levels;
  h->level_table_capacity = o.level_table_capacity;
  h->off_levels = o.levels;
  h->off_level_heap = o.level_heap;
  h->off_level_table = o.level_table;
  h->off_owners = o.owners;
  h->off_holds = o.holds;
  h->off_hold_table = o.hold_table;
  h->off_checksums = o.checksums;
  h->total_bytes = o.total;
  h->free_head = kNone;
  h->free_tail = kNone;
  h->hold_free_head = o.max_holds ? 0 : kNone;
  h->level_free_head = 0;
  ArenaRegions r = locate_regions(memory);
  for (uint32_t i = 0; i < config.num_blocks; ++i) {
    r.blocks[i].prev = kNone;
    r.blocks[i].next = kNone;
  }
  for (uint32_t i = 0; i < config.max_owners; ++i) r.owners[i] = OwnerRecord{kNone, 0, kNone, 0, 0};
  for (uint32_t i = 0; i < o.max_levels; ++i)
    r.levels[i] = LevelRecord{0, i + 1 < o.max_levels ? i + 1 : kNone, kNone, kNone};
  for (uint32_t i = 0; i < o.max_holds; ++i)
    r.holds[i] = HoldEntry{kNone, kNone, 0, kNone, i + 1 < o.max_holds ? i + 1 : kNone, 0};
  return r;
}

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

}  // namespace kvpool::pool
