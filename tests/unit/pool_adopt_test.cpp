// PoolCore::adopt_registry (a restarted daemon takes over its predecessor's registry) and
// the generation tags that let a daemon tell its handles from another daemon's.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvpool/pool/pool_core.hpp"
#include "kvpool/pool/previous_arena.hpp"

namespace kvpool::pool {
namespace {

// A heap arena; copy() is what a killed daemon leaves behind: its bytes, frozen.
class Arena {
 public:
  explicit Arena(uint32_t blocks, uint32_t owners = 4) : config_{blocks, owners, 0} {
    bytes_ = *PoolCore::arena_bytes(config_);
    mem_ = static_cast<char*>(std::aligned_alloc(64, (bytes_ + 63) / 64 * 64));
    core_ = std::move(PoolCore::create(mem_, bytes_, config_, 0, "g").value());
  }
  Arena(const Arena&) = delete;
  ~Arena() { std::free(mem_); }
  PoolCore& core() { return core_; }
  // A second arena holding a byte copy of this one, attached (as the next daemon maps it).
  std::unique_ptr<Arena> copy() const {
    auto a = std::make_unique<Arena>(config_.num_blocks, config_.max_owners);
    std::memcpy(a->mem_, mem_, bytes_);
    a->core_ = std::move(PoolCore::attach(a->mem_, bytes_, 0, "g").value());
    return a;
  }
  char* mem() { return mem_; }

  std::vector<BlockRef> allocate(uint32_t owner, uint32_t n) {
    std::vector<BlockRef> out(n);
    EXPECT_TRUE(core_.allocate(owner, n, out.data()).is_ok());
    return out;
  }
  std::vector<BlockRef> register_hashes(uint32_t owner, const std::vector<BlockRef>& blocks,
                                        const std::vector<uint64_t>& hashes, uint32_t prio = 0) {
    std::vector<RegisterItem> items;
    for (size_t i = 0; i < blocks.size(); ++i)
      items.push_back(
          RegisterItem{blocks[i], hashes[i], hashes[i] ^ 0x55, 0, prio, 0, hashes[i] * 3});
    std::vector<BlockRef> out(blocks.size());
    EXPECT_TRUE(core_.register_blocks(owner, items, out.data()).is_ok());
    return out;
  }
  std::vector<BlockRef> match(uint32_t owner, const std::vector<uint64_t>& hashes) {
    std::vector<BlockRef> out(hashes.size());
    auto n = core_.match(owner, hashes, out.data());
    EXPECT_TRUE(n.is_ok());
    out.resize(n.is_ok() ? *n : 0);
    return out;
  }

 private:
  PoolCoreConfig config_;
  size_t bytes_ = 0;
  char* mem_ = nullptr;
  PoolCore core_;
};

TEST(Adopt, KeepsEveryRegisteredBlockAsInactiveAndFreesTheRest) {
  Arena old(16);
  auto inactive = old.register_hashes(0, old.allocate(0, 3), {101, 102, 103});
  ASSERT_TRUE(old.core().release_immutable(0, inactive).is_ok());  // returned: 103, 102, 101
  auto active = old.register_hashes(1, old.allocate(1, 2), {201, 202}, /*prio=*/5);
  auto mut = old.allocate(2, 4);
  old.match(3, {101});  // promoted again: active, held by owner 3
  auto before = old.core().counts();
  ASSERT_EQ(before.active, 3u);
  ASSERT_EQ(before.inactive, 2u);
  ASSERT_EQ(before.mutable_blocks, 4u);

  auto frozen = old.copy();
  Arena now(16, 8);  // another max_owners is no shape change
  auto counts = now.core().adopt_registry(frozen->core());
  ASSERT_TRUE(counts.is_ok()) << counts.status().to_string();
  EXPECT_EQ(counts->adopted, 5u);
  EXPECT_EQ(counts->dropped, 0u);
  EXPECT_EQ(counts->freed, 4u);
  EXPECT_FALSE(counts->interrupted);
  auto c = now.core().counts();
  EXPECT_EQ(c.inactive, 5u);
  EXPECT_EQ(c.free, 11u);
  EXPECT_EQ(c.active + c.mutable_blocks, 0u);
  EXPECT_TRUE(now.core().check_invariants().is_ok());
  // Same ids, same hashes, same checksums and generations; matchable.
  auto hit = now.match(0, {201, 202});
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0], active[0]);
  EXPECT_EQ(hit[1], active[1]);
  EXPECT_EQ(now.core().checksum(active[0].id), 201u * 3);
  EXPECT_EQ(now.core().block(active[1].id).priority, 5u);
  // Eviction order: the previously inactive first (in the order they were returned), then
  // the previously active ones.
  auto all = now.allocate(1, 11);  // the free blocks
  (void)all;
  std::vector<BlockRef> ev(1);
  ASSERT_TRUE(now.core().allocate(1, 1, ev.data()).is_ok());
  EXPECT_EQ(ev[0].id, inactive[2].id) << "103 was returned first";
  ASSERT_TRUE(now.core().allocate(1, 1, ev.data()).is_ok());
  EXPECT_EQ(ev[0].id, inactive[1].id);
  ASSERT_TRUE(now.core().allocate(1, 1, ev.data()).is_ok());
  EXPECT_EQ(ev[0].id, inactive[0].id)
      << "101 was active when the daemon died: evicted last among priority 0";
  EXPECT_TRUE(now.core().check_invariants().is_ok());
}

// A daemon killed inside a call can leave a block that claims a registration the hash
// table does not confirm (or a table entry naming a block that claims another hash): that
// block is dropped, nothing else.
TEST(Adopt, DropsABlockWhoseRegistrationHasNoWitness) {
  Arena old(8);
  auto reg = old.register_hashes(0, old.allocate(0, 3), {11, 12, 13});
  ASSERT_TRUE(old.core().release_immutable(0, reg).is_ok());
  auto frozen = old.copy();
  // Block of hash 12: its meta now names a hash the table has no entry for (half-way
  // through a registration), and the writer's sequence is odd (inside a call).
  auto* meta = reinterpret_cast<BlockMeta*>(frozen->mem() + frozen->core().header().off_blocks);
  meta[reg[1].id].sequence_hash = 99;
  auto& seq = const_cast<std::atomic<uint32_t>&>(frozen->core().header().stats.write_seq);
  seq.store(seq.load() | 1);
  Arena now(8);
  auto counts = now.core().adopt_registry(frozen->core());
  ASSERT_TRUE(counts.is_ok()) << counts.status().to_string();
  EXPECT_TRUE(counts->interrupted);
  EXPECT_EQ(counts->adopted, 2u);
  EXPECT_EQ(counts->dropped, 1u);
  EXPECT_TRUE(now.match(0, {99}).empty());
  EXPECT_TRUE(now.match(0, {12}).empty());
  EXPECT_EQ(now.match(0, {13}).size(), 1u);
  EXPECT_EQ(now.core().counts().free, 6u);
  EXPECT_TRUE(now.core().check_invariants().is_ok());
}

// A client of the dead daemon that still runs may still read what it held (and write its
// mutable blocks): those stay out of circulation, held by the keeper, until it is gone.
TEST(Adopt, KeepsWhatLiveClientsHeldUntilTheyAreGone) {
  Arena old(8);
  auto a = old.register_hashes(0, old.allocate(0, 1), {31});  // owner 0: lives on
  auto m = old.allocate(0, 1);
  auto b = old.register_hashes(1, old.allocate(1, 1), {32});  // owner 1: gone
  auto n = old.allocate(1, 1);
  auto frozen = old.copy();
  Arena now(8, 4);
  const std::vector<uint8_t> live{1, 0, 0};
  const uint32_t keeper = 3;
  auto counts = now.core().adopt_registry(frozen->core(), live, keeper);
  ASSERT_TRUE(counts.is_ok()) << counts.status().to_string();
  EXPECT_EQ(counts->adopted, 2u);
  EXPECT_EQ(counts->pinned, 2u);
  EXPECT_EQ(counts->freed, 1u);
  const PoolCore& c = now.core();
  EXPECT_EQ(c.block(a[0].id).state, static_cast<uint8_t>(BlockStateCode::kActive));
  EXPECT_EQ(c.holds_of(keeper, a[0].id), 1u);
  EXPECT_EQ(c.block(m[0].id).state, static_cast<uint8_t>(BlockStateCode::kMutable));
  EXPECT_EQ(c.block(m[0].id).owner, keeper);
  EXPECT_EQ(c.block(b[0].id).state, static_cast<uint8_t>(BlockStateCode::kInactive));
  EXPECT_EQ(c.block(n[0].id).state, static_cast<uint8_t>(BlockStateCode::kFree));
  EXPECT_TRUE(c.check_invariants().is_ok());
  EXPECT_EQ(now.match(0, {31}).size(), 1u) << "still matchable while held";
  // Nobody else gets them meanwhile: 5 free + 1 inactive (32) are all there is.
  std::vector<BlockRef> all(7);
  EXPECT_EQ(now.core().allocate(1, 7, all.data()).code(), ErrorCode::kNotEnoughBlocks);
  EXPECT_EQ(now.core().release_owner(keeper), 2u);
  EXPECT_EQ(c.block(m[0].id).state, static_cast<uint8_t>(BlockStateCode::kFree));
  EXPECT_TRUE(c.check_invariants().is_ok());
}

TEST(Adopt, RefusesAnotherShapeOrAPoolInUse) {
  Arena old(8);
  auto frozen = old.copy();
  Arena bigger(16);
  auto r = bigger.core().adopt_registry(frozen->core());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidState);
  Arena used(8);
  used.allocate(0, 1);
  EXPECT_FALSE(used.core().adopt_registry(frozen->core()).is_ok());
}

// Issue 27, item 2: the previous arena is hostile input. Each header field scribbled, with
// values a stray writer leaves: a field that sizes or places anything (and the tick) makes
// the pool start empty with an error naming it; a complete arena whose bookkeeping
// disagrees with its lists fails its invariants; the bookkeeping of an interrupted arena
// is never read (what adoption keeps is the same as without the scribble). Never a crash.
TEST(Adopt, EveryScribbledHeaderFieldIsBoundedBeforeUse) {
  struct Field {
    const char* name;
    size_t offset, size;
    bool sizes;  // sizes or places something: must be refused, named
  };
#define KVPOOL_FIELD(f, sizes) \
  Field { #f, offsetof(ArenaHeader, f), sizeof(ArenaHeader::f), sizes }
  const Field fields[] = {
      KVPOOL_FIELD(magic, true),
      KVPOOL_FIELD(version, true),
      KVPOOL_FIELD(num_blocks, true),
      KVPOOL_FIELD(max_owners, true),
      KVPOOL_FIELD(max_holds, true),
      KVPOOL_FIELD(table_capacity, true),
      KVPOOL_FIELD(hold_table_capacity, true),
      KVPOOL_FIELD(max_levels, true),
      KVPOOL_FIELD(level_table_capacity, true),
      KVPOOL_FIELD(off_blocks, true),
      KVPOOL_FIELD(off_table, true),
      KVPOOL_FIELD(off_levels, true),
      KVPOOL_FIELD(off_level_heap, true),
      KVPOOL_FIELD(off_level_table, true),
      KVPOOL_FIELD(off_owners, true),
      KVPOOL_FIELD(off_holds, true),
      KVPOOL_FIELD(off_hold_table, true),
      KVPOOL_FIELD(off_checksums, true),
      KVPOOL_FIELD(total_bytes, true),
      KVPOOL_FIELD(tick, false),  // bounded: one near 2^64 would wrap the eviction order
      KVPOOL_FIELD(free_head, false),
      KVPOOL_FIELD(free_tail, false),
      KVPOOL_FIELD(level_count, false),
      KVPOOL_FIELD(level_free_head, false),
      KVPOOL_FIELD(hold_free_head, false),
      KVPOOL_FIELD(registered, false),
      KVPOOL_FIELD(generation_tag, false),
  };
#undef KVPOOL_FIELD
  // 8 owners: their records fill whole cache lines, so that any larger max_owners moves
  // the offsets after them (alignment padding would hide a smaller step: kvpoold checks
  // max_owners against its predecessor's max_clients, daemon/adoption.cpp).
  Arena old(16, 8);
  auto inactive = old.register_hashes(0, old.allocate(0, 3), {101, 102, 103});
  ASSERT_TRUE(old.core().release_immutable(0, inactive).is_ok());
  old.register_hashes(1, old.allocate(1, 2), {201, 202}, /*prio=*/5);
  old.allocate(2, 4);
  const size_t bytes = *PoolCore::arena_bytes(PoolCoreConfig{16, 8, 0});
  // What adoption keeps of the unscribbled arena (interrupted: no invariant check).
  uint32_t baseline = 0;
  {
    auto frozen = old.copy();
    reinterpret_cast<ArenaHeader*>(frozen->mem())->stats.write_seq.fetch_or(1);
    auto prev = open_previous_arena(frozen->mem(), bytes, "g");
    ASSERT_TRUE(prev) << prev.status().to_string();
    Arena now(16);
    auto counts = now.core().adopt_registry(*prev);
    ASSERT_TRUE(counts) << counts.status().to_string();
    baseline = counts->adopted;
    ASSERT_EQ(baseline, 5u);
  }
  for (const Field& f : fields) {
    uint64_t orig = 0;
    std::memcpy(&orig, old.mem() + f.offset, f.size);
    const uint64_t ones = f.size == 8 ? ~uint64_t{0} : 0xFFFFFFFFull;
    for (uint64_t value : {uint64_t{0}, uint64_t{1}, orig + 1, orig ^ (uint64_t{1} << 31),
                           uint64_t{0xA5A5A5A5A5A5A5A5ull} & ones, ones}) {
      if (value == orig) continue;
      for (bool interrupted : {false, true}) {
        SCOPED_TRACE(std::string(f.name) + " = " + std::to_string(value) +
                     (interrupted ? " (interrupted)" : " (complete)"));
        auto frozen = old.copy();
        char* mem = frozen->mem();
        std::memcpy(mem + f.offset, &value, f.size);
        if (interrupted) reinterpret_cast<ArenaHeader*>(mem)->stats.write_seq.fetch_or(1);
        auto prev = open_previous_arena(mem, bytes, "g");
        if (f.sizes || (std::string(f.name) == "tick" && value >= (uint64_t{1} << 62))) {
          ASSERT_FALSE(prev) << "a scribbled " << f.name << " was accepted";
          EXPECT_NE(prev.status().message().find(f.name), std::string::npos)
              << prev.status().to_string();
          continue;
        }
        Arena now(16);
        if (!interrupted) {
          // Bookkeeping the invariants check: refused (the pool starts empty).
          const std::string name = f.name;
          if (name == "free_head" || name == "level_count" || name == "registered") {
            EXPECT_FALSE(prev) << "a complete arena with a scribbled " << name;
            continue;
          }
          // Bookkeeping nobody reads back from a dead daemon's arena.
          ASSERT_TRUE(prev) << prev.status().to_string();
        }
        ASSERT_TRUE(prev) << prev.status().to_string();
        auto counts = now.core().adopt_registry(*prev);
        ASSERT_TRUE(counts) << counts.status().to_string();
        EXPECT_EQ(counts->adopted, baseline);
        EXPECT_TRUE(now.core().check_invariants().is_ok());
      }
    }
  }
}

TEST(GenerationTags, EveryGenerationCarriesTheTagAndForeignHandlesAreNamed) {
  Arena a(4), b(4);
  a.core().set_generation_tag(7);
  b.core().set_generation_tag(9);
  auto ra = a.allocate(0, 1), rb = b.allocate(0, 1);
  EXPECT_EQ(generation_tag_of(ra[0].generation), 7u);
  EXPECT_EQ(ra[0].generation & kGenerationCountMask, 1u);
  ASSERT_EQ(ra[0].id, rb[0].id);
  std::vector<RegisterItem> item{RegisterItem{ra[0], 5, 5, 0, 0, 0}};
  std::vector<BlockRef> out(1);
  Status s = b.core().register_blocks(0, item, out.data());
  EXPECT_EQ(s.code(), ErrorCode::kInvalidHandle);
  EXPECT_NE(s.message().find("another kvpoold"), std::string::npos) << s.to_string();
  // One of our own, only stale: said so.
  ASSERT_TRUE(b.core().release_mutable(0, rb).is_ok());
  auto again = b.allocate(0, 4);
  item[0].block = rb[0];
  s = b.core().register_blocks(0, item, out.data());
  EXPECT_NE(s.message().find("stale handle"), std::string::npos) << s.to_string();
  // The count wraps inside the tag.
  EXPECT_EQ(next_generation((9u << 24) | kGenerationCountMask, 9), 9u << 24);
  EXPECT_EQ(next_generation(41, 0), 42u) << "untagged: a plain counter";
}

}  // namespace
}  // namespace kvpool::pool
