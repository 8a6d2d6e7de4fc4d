// libFuzzer target: adoption of a previous daemon's arena (pool::open_previous_arena, then
// adopt_registry), the path every kvpoold takes at start with segments a supervisor kept,
// which anyone of the daemon's uid may have written. The input patches a populated arena
// (registered, inactive, held and mutable blocks; several priorities): each patch writes 1,
// 2, 4 or 8 bytes at an offset, the header's fields and the hash table most often. It must
// never crash or hang; what it accepts adopts into a pool that passes every invariant,
// whose pins name blocks of the pool, and that hands them over and releases cleanly.
//
// Input: byte 0: flags (bit 0: the writer died inside a call, bit 1: every previous owner
// still runs); then records of 10 bytes: u16 where, u8 width, u8 region, u40 value (LE),
// u8 (bit 7: write the value inverted, so high values come as easily as low ones).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvpool/pool/pool_core.hpp"
#include "kvpool/pool/previous_arena.hpp"

using namespace kvpool;
using namespace kvpool::pool;

namespace {

constexpr PoolCoreConfig kConfig{32, 4, 0};

[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "adopt_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

struct AlignedArena {
  explicit AlignedArena(size_t n) : bytes(n) {
    mem = static_cast<char*>(std::aligned_alloc(64, (n + 63) / 64 * 64));
  }
  ~AlignedArena() { std::free(mem); }
  AlignedArena(const AlignedArena&) = delete;
  AlignedArena& operator=(const AlignedArena&) = delete;
  size_t bytes;
  char* mem;
};

void must(const Status& s, const char* what) {
  if (!s.is_ok()) die(what, s.to_string());
}

// The arena a busy daemon leaves: every structure in use.
const AlignedArena& pristine() {
  static AlignedArena* a = [] {
    auto* arena = new AlignedArena(*PoolCore::arena_bytes(kConfig));
    auto core = PoolCore::create(arena->mem, arena->bytes, kConfig, 0, "fuzz");
    if (!core) die("create", core.status().to_string());
    BlockRef blocks[12];
    must(core->allocate(0, 12, blocks), "allocate");
    std::vector<RegisterItem> items;
    for (uint32_t i = 0; i < 10; ++i)
      items.push_back(RegisterItem{blocks[i], 1000 + i, 2000 + i, i > 0 ? 999 + i : 0, i % 3,
                                   i > 0 ? 1u : 0u, 3000 + i});
    BlockRef out[10];
    must(core->register_blocks(0, items, out), "register");
    must(core->release_immutable(0, std::span<const BlockRef>(out, 6)), "release");
    const uint64_t hashes[] = {1000, 1001, 1002, 1007};
    BlockRef hit[4];
    auto n = core->match(1, hashes, hit);
    if (!n) die("match", n.status().to_string());
    must(core->release_mutable(0, std::span<const BlockRef>(blocks + 10, 1)), "release_mutable");
    BlockRef more[3];
    must(core->allocate(2, 3, more), "allocate");
    return arena;
  }();
  return *a;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const AlignedArena& base = pristine();
  AlignedArena arena(base.bytes);
  std::memcpy(arena.mem, base.mem, base.bytes);
  const uint8_t flags = size > 0 ? data[0] : 0;
  const auto* h = reinterpret_cast<const ArenaHeader*>(base.mem);
  for (size_t at = 1; at + 10 <= size; at += 10) {
    uint16_t where;
    std::memcpy(&where, data + at, 2);
    const uint32_t width = 1u << (data[at + 2] & 3);
    uint64_t value = 0;
    std::memcpy(&value, data + at + 4, 5);
    if (data[at + 9] & 0x80) value = ~value;  // high values too
    // Region: the header, the block records, the hash table, or anywhere.
    uint64_t off;
    switch (data[at + 3] & 3) {
      case 0:
        off = where % sizeof(ArenaHeader);
        break;
      case 1:
        off = h->off_blocks + where % (h->num_blocks * sizeof(BlockMeta));
        break;
      case 2:
        off = h->off_table + where % (uint64_t{h->table_capacity} * sizeof(TableEntry));
        break;
      default:
        off = where % base.bytes;
        break;
    }
    if (off + width > base.bytes) continue;
    std::memcpy(arena.mem + off, &value, width);
  }
  auto* ah = reinterpret_cast<ArenaHeader*>(arena.mem);
  if (flags & 1) ah->stats.write_seq.fetch_or(1);

  auto prev = open_previous_arena(arena.mem, arena.bytes, "fuzz");
  if (!prev) {
    if (prev.status().message().empty()) die("refused without a reason", "");
    return 0;
  }
  AlignedArena fresh_mem(base.bytes);
  auto fresh = PoolCore::create(fresh_mem.mem, fresh_mem.bytes, PoolCoreConfig{32, 5, 0}, 0, "now");
  if (!fresh) die("create", fresh.status().to_string());
  std::vector<uint8_t> live(kConfig.max_owners, (flags & 2) ? 1 : 0);
  const uint32_t keeper = 4;
  std::vector<AdoptPin> pins;
  auto counts = fresh->adopt_registry(*prev, live, keeper, &pins);
  if (!counts) return 0;  // refused with a reason: the pool starts empty
  if (Status s = fresh->check_invariants(); !s.is_ok()) die("adopted pool unsound", s.to_string());
  // The reattach path: hand every pin over to owner 0 (some are refused), then let the
  // keeper go. Whatever happens, the pool stays sound.
  for (const AdoptPin& p : pins) {
    if (p.id >= fresh->num_blocks()) die("pin out of range", std::to_string(p.id));
    // As daemon/previous_clients.cpp does: a pin with more references than one client may
    // hold comes from a scribbled hold count and is never handed over.
    if (p.references > 1024) continue;
    (void)fresh->hand_over(keeper, 0, BlockRef{p.id, p.generation}, p.references);
  }
  (void)fresh->release_owner(keeper);
  (void)fresh->release_owner(0);
  if (Status s = fresh->check_invariants(); !s.is_ok())
    die("pool unsound after hand-over and release", s.to_string());
  return 0;
}
