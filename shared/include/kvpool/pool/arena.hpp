// The pool core's state: plain structs in one caller-provided memory region, addressed by
// index, never by pointer, so the same bytes are valid on the heap (in-process pool) and in
// the daemon's control segment (mapped read-only by clients and kvpoolctl).
//
// Region layout (offsets in ArenaHeader, each 64-byte aligned):
//   ArenaHeader | BlockMeta[num_blocks] | TableEntry[table_capacity]   (sequence hash -> block)
//   | LevelRecord[max_levels] | uint32_t level_heap[max_levels] | TableEntry[level_table_capacity]
//   | OwnerRecord[max_owners] | HoldEntry[max_holds] | TableEntry[hold_table_capacity]
//   | uint64_t checksums[num_blocks]   (per-block checksum; kept apart so BlockMeta stays
//                                       one cache line: only checks read it)
//
// Inactive blocks: Dynamo orders them by (priority, returned_tick, acquired_tick, hash).
// returned_tick is unique and grows with every return, so within one priority the return
// order *is* the key order: each priority level is a FIFO list (append on return, evict
// from the head, O(1) unlink on a match), and a small min-heap orders the levels.
// Eviction is O(1) instead of O(log n) cache-missing heap steps.
//
// Single writer (the daemon's progress engine, or the one in-process user). Fields other
// processes read while it runs (counts and stats) are relaxed atomics; everything else is
// only read by others under a consistent snapshot (kvpoolctl check) or after the writer died.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace kvpool::pool {

inline constexpr uint32_t kNone = 0xFFFFFFFFu;  // "no index" in every intrusive link
inline constexpr uint64_t kArenaMagic = 0x4B5650504F4F4C31ull;  // "KVPPOOL1"
// 2: per-block checksums (ArenaHeader::off_checksums, PoolStats::checksum_*).
inline constexpr uint32_t kArenaVersion = 2;

enum class BlockStateCode : uint8_t {
  kFree = 0,      // in the free FIFO (never used, or reset)
  kMutable = 1,   // handed to one owner, not registered
  kActive = 2,    // registered, refcount > 0
  kInactive = 3,  // registered, refcount == 0, in its priority level's FIFO, still matchable
};

inline constexpr uint8_t kFlagHasParent = 1;
inline constexpr uint8_t kFlagScratch = 2;  // transient mark used while validating a batch
// kActive only: its bytes failed their checksum. It left the registry at once (no match
// or register finds it); its holders may still read it, and it goes free, never
// inactive, when their last reference goes.
inline constexpr uint8_t kFlagPoisoned = 4;

// 64 bytes: one cache line per block.
struct BlockMeta {
  uint64_t sequence_hash;
  uint64_t block_hash;     // the block-local ("tokens") hash, for events
  uint64_t parent_hash;    // valid when kFlagHasParent
  uint64_t returned_tick;  // bumped when the last reference is dropped
  uint64_t acquired_tick;  // bumped when handed out (allocate or match/register hit)
  uint32_t generation;     // bumped on every allocation: handles of older uses are stale
  uint32_t priority;       // lower is evicted first
  union {
    uint32_t refcount;  // kActive: sum of all holders' counts
    uint32_t owner;     // kMutable: the one owner
    uint32_t level;     // kInactive: its LevelRecord
  };
  uint32_t prev;  // kMutable: owner's mutable list; kInactive: level FIFO
  uint32_t next;  // kFree: free FIFO; kMutable: owner's mutable list; kInactive: level FIFO
  uint8_t state;  // BlockStateCode
  uint8_t flags;
  uint16_t reserved;
};
static_assert(sizeof(BlockMeta) == 64, "block metadata must stay one cache line");
static_assert(std::is_trivially_copyable_v<BlockMeta> && std::is_standard_layout_v<BlockMeta>);

// One slot of an open-addressing (linear probing, backward-shift delete) hash table.
struct TableEntry {
  uint64_t key;
  uint32_t value;
  uint32_t used;  // 0 empty, 1 used (any key value is valid, 0 included)
};
static_assert(sizeof(TableEntry) == 16);
static_assert(std::is_trivially_copyable_v<TableEntry>);

// (owner, block) -> how many references that owner holds on that block. Linked per owner
// so release_owner() walks only what the owner holds: O(blocks held), never owners x blocks.
struct HoldEntry {
  uint32_t block;
  uint32_t owner;
  uint32_t count;  // 0 means the entry is on the free list
  uint32_t prev;
  uint32_t next;  // owner's hold list, or the free list of entries
  uint32_t reserved;
};
static_assert(sizeof(HoldEntry) == 24);
static_assert(std::is_trivially_copyable_v<HoldEntry>);

// One priority level of inactive blocks: a FIFO in return order.
struct LevelRecord {
  uint32_t priority;
  uint32_t head;  // oldest return: evicted first; next free record when unused
  uint32_t tail;
  uint32_t heap_pos;  // index in the level heap; kNone when unused
};
static_assert(sizeof(LevelRecord) == 16);
static_assert(std::is_trivially_copyable_v<LevelRecord>);

struct OwnerRecord {
  uint32_t mutable_head;  // list through BlockMeta::prev/next
  uint32_t mutable_count;
  uint32_t hold_head;     // list through HoldEntry::prev/next
  uint32_t hold_entries;  // distinct blocks held
  uint64_t hold_refs;     // references held (sum of counts)
};
static_assert(sizeof(OwnerRecord) == 24);
static_assert(std::is_trivially_copyable_v<OwnerRecord>);

// Counters readable by other processes while the writer runs (relaxed; monotonic or gauges).
struct PoolStats {
  std::atomic<uint32_t> free_blocks;
  std::atomic<uint32_t> mutable_blocks;
  std::atomic<uint32_t> active_blocks;
  std::atomic<uint32_t> inactive_blocks;
  std::atomic<uint32_t> holds_used;
  // Seqlock of the writer: odd while a PoolCore call is changing the arena, bumped again
  // (even) when it is done. A reader that copies the arena (kvpoolctl check) keeps a copy
  // only if it saw the same even value before and after.
  std::atomic<uint32_t> write_seq;
  std::atomic<uint64_t> allocations;       // blocks handed out by allocate
  std::atomic<uint64_t> evictions;         // inactive blocks evicted to satisfy allocate
  std::atomic<uint64_t> registrations;     // blocks newly registered
  std::atomic<uint64_t> register_dedups;   // register calls answered by an existing block
  std::atomic<uint64_t> match_queries;     // hashes asked for in match
  std::atomic<uint64_t> match_hits;        // hashes answered
  std::atomic<uint64_t> released_refs;     // immutable references dropped
  std::atomic<uint64_t> rejected_handles;  // stale / foreign / unknown handles refused
  // Checksummed blocks the daemon hashed, and those of them that failed (poisoned, evicted).
  std::atomic<uint64_t> checksum_verified;
  std::atomic<uint64_t> checksum_mismatches;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
              std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::is_standard_layout_v<PoolStats>);
static_assert(sizeof(PoolStats) == 104);

struct ArenaHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t num_blocks;
  uint32_t max_owners;
  uint32_t max_holds;
  uint32_t table_capacity;       // power of two >= 2 * num_blocks
  uint32_t hold_table_capacity;  // power of two >= 2 * max_holds
  uint32_t max_levels;           // distinct priorities among inactive blocks at once
  uint32_t level_table_capacity;
  uint64_t off_blocks;
  uint64_t off_table;
  uint64_t off_levels;
  uint64_t off_level_heap;
  uint64_t off_level_table;
  uint64_t off_owners;
  uint64_t off_holds;
  uint64_t off_hold_table;
  uint64_t off_checksums;
  uint64_t total_bytes;

  // Writer-private bookkeeping.
  uint64_t tick;
  uint32_t free_head;
  uint32_t free_tail;
  uint32_t level_count;  // levels in the heap
  uint32_t level_free_head;
  uint32_t hold_free_head;
  uint32_t registered;  // table size
  // The top byte of every generation this arena's writer issues (0: none, the in-process
  // pools: generations are plain 32-bit counters). See next_generation.
  uint32_t generation_tag;

  alignas(64) PoolStats stats;
};
static_assert(std::is_standard_layout_v<ArenaHeader>);
static_assert(offsetof(ArenaHeader, stats) == 192);
static_assert(sizeof(ArenaHeader) == 320);

// Generations under a daemon: the top byte is the tag of the daemon that issued it, the
// low 24 bits count the block's uses (they go on counting across an adoption, and wrap
// within the tag: a stale handle is confused with a live one only 16M uses later). Every
// daemon draws its own tag, distinct from those still present in the arena it adopted, so
// a handle that a previous daemon issued for a block reused since never matches a
// generation this daemon issues, and kvpoold can say where it came from. Tag 0: the plain
// 32-bit counter of in-process pools.
inline constexpr uint32_t kGenerationTagShift = 24;
inline constexpr uint32_t kGenerationCountMask = (1u << kGenerationTagShift) - 1;
constexpr uint32_t generation_tag_of(uint32_t generation) {
  return generation >> kGenerationTagShift;
}
constexpr uint32_t next_generation(uint32_t generation, uint32_t tag) {
  return tag == 0 ? generation + 1
                  : (tag << kGenerationTagShift) | ((generation + 1) & kGenerationCountMask);
}

}  // namespace kvpool::pool
