// The block pool: Dynamo 0.2.1 BlockPool semantics (docs/design.md §1) over an Arena.
//
// - allocate(n): all or nothing; free FIFO first, then evict the inactive block with the
//   lowest (priority, returned_tick, acquired_tick, sequence_hash).
// - register_blocks: per block, in order: active hit -> share it (+1) and recycle the
//   caller's block; inactive hit -> promote it and recycle; else the caller's block
//   becomes registered and active. One Stored event per call for the new ones.
// - match: longest known prefix; each hit takes one reference.
// - Releases: a mutable block goes back reset to the free FIFO tail; an immutable
//   reference drop that leaves no holder makes the block inactive (matchable, evictable).
//
// Every reference is held by an owner (the daemon's client slot; 0 in-process), so
// release_owner() can return everything a dead client held. Handles are {id, generation};
// anything that does not name a block this owner holds in the right state is rejected
// with kInvalidHandle and changes nothing.
//
// Single-threaded: the caller serialises all calls (the daemon's progress engine).
//
// The core is the operations; each concept it keeps in the arena has its own class, the way
// Dynamo's kvbm-logical splits pools/, registry/ and events/: the free FIFO (free_fifo.hpp),
// the inactive levels (inactive_levels.hpp), what owners hold (owner_holds.hpp), the registry
// and its events (registry.hpp), quotas (owner_quota.hpp), the arena's layout
// (arena_layout.hpp) and invariants (arena_invariants.hpp). The core's own files: the
// operations (pool_core.cpp), releases (pool_release.cpp), checksums (pool_checksums.cpp),
// opaque keys (pool_keyed.cpp), adoption (pool_adopt.cpp) and hand-over (pool_hand_over.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpool/core/status.hpp"
#include "kvpool/pool/arena.hpp"
#include "kvpool/pool/arena_layout.hpp"
#include "kvpool/pool/events.hpp"
#include "kvpool/pool/free_fifo.hpp"
#include "kvpool/pool/inactive_levels.hpp"
#include "kvpool/pool/owner_holds.hpp"
#include "kvpool/pool/owner_quota.hpp"
#include "kvpool/pool/previous_arena.hpp"
#include "kvpool/pool/registry.hpp"
#include "kvpool/shm/protocol.hpp"

namespace kvpool::pool {

// The wire records are the pool core's own handles and registration items.
using proto::BlockRef;
using proto::RegisterItem;

// PoolCoreConfig: arena_layout.hpp. OwnerQuota: owner_quota.hpp.

// What adopt_registry kept of a previous daemon's arena.
struct AdoptCounts {
  uint32_t adopted = 0;  // registered blocks kept (inactive now: their holders are gone)
  uint32_t dropped = 0;  // blocks that claimed a registration it could not prove (now free)
  uint32_t freed = 0;    // mutable blocks of clients that are gone (now free)
  // Blocks a client of the previous daemon that still runs held (it may still read or
  // write them): kept out of circulation under the keeper owner until it is gone.
  uint32_t pinned = 0;
  bool interrupted = false;  // the previous writer died inside a call (odd write sequence)
};

// One block a client of the previous daemon that still runs held there, as adoption found
// it (PoolCore::adopt_registry): what the client may take back when it reattaches.
struct AdoptPin {
  uint32_t owner;       // its previous owner (client slot)
  uint32_t id;          // the block, now held by the keeper
  uint32_t generation;  // unchanged by adoption
  uint32_t references;  // the references it held; 0: its mutable block
};

struct PoolCounts {
  uint32_t total;
  uint32_t free;
  uint32_t mutable_blocks;
  uint32_t active;
  uint32_t inactive;
};

struct AdoptionPlan;  // pool_adopt.cpp

class PoolCore {
 public:
  PoolCore() = default;

  // Bytes of arena a config needs, or an error naming the bad field.
  static Result<size_t> arena_bytes(const PoolCoreConfig& config);
  // Initialises a fresh arena in `memory` (64-byte aligned, arena_bytes long).
  static Result<PoolCore> create(void* memory, size_t bytes, const PoolCoreConfig& config,
                                 uint32_t pool_index = 0, std::string name = "pool");
  // A view of an arena some writer initialised, to write it (validates as below). Readers
  // of another process's arena use ArenaView (arena_view.hpp), or attach to a private copy.
  static Result<PoolCore> attach(void* memory, size_t bytes, uint32_t pool_index = 0,
                                 std::string name = "pool");
  // Checks an arena some writer initialised: magic, version, and every offset of its header
  // against its sizes and `bytes`. What attach checks; for read-only views.
  static Status validate(const void* memory, size_t bytes);

  void set_event_sink(EventSink* sink) { registry_.set_sink(sink); }
  // The daemon's generation tag (arena.hpp, next_generation): every generation allocate
  // issues from now on carries it. 0 (the default): plain counters.
  void set_generation_tag(uint8_t tag);
  // kInvalidArgument when max_owners * max_refs_per_block could wrap a refcount.
  Status set_quota(const OwnerQuota& quota);
  const OwnerQuota& quota() const { return quota_; }

  // Hands out n mutable blocks to `owner`, written to out[0..n).
  Status allocate(uint32_t owner, uint32_t n, BlockRef* out);
  // Registers committed mutable blocks of `owner`; out[i] is the immutable block that
  // now holds items[i]'s hash (the caller's block, or the one it was deduplicated onto).
  // Validates every item before changing anything. `tokens` (optional) go to the event
  // sink with the blocks they belong to; the core neither checks nor keeps them.
  Status register_blocks(uint32_t owner, std::span<const RegisterItem> items, BlockRef* out,
                         const RegisterTokens& tokens = {});
  // Longest known prefix of `hashes`; out[0..result) get one reference each.
  Result<uint32_t> match(uint32_t owner, std::span<const uint64_t> hashes, BlockRef* out);

  // ---- opaque keys (pool_keyed.cpp) ----
  // Per hash, no prefix stop: out[i] gets the block holding hashes[i] (one reference) or
  // {kNoBlock, 0} when none does. Quotas as match. Returns the hits.
  Result<uint32_t> lookup(uint32_t owner, std::span<const uint64_t> hashes, BlockRef* out);
  // Takes each of `refs` (immutable blocks `owner` holds) out of the registry, as an
  // eviction: Removed event now, the block free at its last release. out[i] is refs[i], or
  // {kNoBlock, 0} when it had left the registry already. Every handle is checked first.
  Status remove(uint32_t owner, std::span<const BlockRef> refs, BlockRef* out);
  // One reference on registered block `sequence_hash` for the daemon's own use (the disk
  // tier holds a block while it writes it): no match is counted and the block's ticks are
  // left alone. kNotFound when it is not registered (evicted, poisoned).
  Result<BlockRef> hold_registered(uint32_t owner, uint64_t sequence_hash);

  // Returns mutable blocks to the free FIFO. Invalid handles are skipped and counted; the
  // first error is returned after the valid ones are applied.
  // `rejected` (optional) is increased by the number of refused handles.
  Status release_mutable(uint32_t owner, std::span<const BlockRef> blocks,
                         uint32_t* rejected = nullptr);
  // Drops one reference per handle, last handle first (so a sequence released as one batch
  // returns its tail first and the tail is evicted before its parents, as in Dynamo).
  Status release_immutable(uint32_t owner, std::span<const BlockRef> blocks,
                           uint32_t* rejected = nullptr);
  // Everything `owner` holds: mutable blocks freed, every reference dropped. Returns the
  // number of blocks returned (mutable blocks + distinct immutable blocks).
  uint32_t release_owner(uint32_t owner);

  // ---- per-block checksums (kvpool/core/checksum.hpp) ----
  // The checksum its registering client sent with block `id` (kNoChecksum: none). Set when
  // the block is registered, cleared when it is allocated again; a deduplicated
  // registration keeps the existing block's (the same tokens may give other bytes).
  uint64_t checksum(uint32_t id) const { return arena_.checksums[id]; }
  // Registered and matchable: active or inactive, not poisoned.
  bool registered(uint32_t id) const;
  bool poisoned(uint32_t id) const { return (arena_.blocks[id].flags & kFlagPoisoned) != 0; }
  // kInvalidHandle unless `ref` names an immutable block `owner` holds a reference on.
  Status check_held(uint32_t owner, BlockRef ref) const;
  // The daemon hashed registered block `id` (registered(id), checksum(id) set) and got
  // `computed`: counts the check; on a mismatch poisons the block and counts that too.
  proto::ChecksumOutcome record_checksum(uint32_t id, uint64_t computed);

  PoolCounts counts() const;
  const PoolStats& stats() const { return arena_.header->stats; }
  const ArenaHeader& header() const { return *arena_.header; }
  uint32_t num_blocks() const { return arena_.header->num_blocks; }
  uint32_t max_owners() const { return arena_.header->max_owners; }
  const std::string& name() const { return name_; }
  const BlockMeta& block(uint32_t id) const { return arena_.blocks[id]; }
  const OwnerRecord& owner_record(uint32_t owner) const { return arena_.owners[owner]; }
  // References `owner` holds on block `id` (0 if none).
  uint32_t holds_of(uint32_t owner, uint32_t id) const { return holds_.count(owner, id); }
  // Checks every structural invariant (O(blocks + holds)); kInternal naming the first break.
  Status check_invariants() const;

  // Takes over the registry of `previous`, the arena of a daemon that is gone, whose pool
  // had this one's shape (same num_blocks), into this freshly created core (every block
  // free). shared/src/pool/pool_adopt.cpp says what is kept and why it is safe.
  // `live_owners[k]` != 0: previous owner k (a client slot) still runs; what it held is
  // held by `keeper` here (an owner no client uses) until the caller releases it
  // (release_owner(keeper)) once those clients are gone.
  // kInvalidState when this core is not fresh, the shapes differ, or keeper is out of
  // range; kInternal when the result fails check_invariants (the pool then starts empty).
  // `pins` (optional) receives what each live previous owner held, for reattach.
  Result<AdoptCounts> adopt_registry(const PreviousArena& previous,
                                     std::span<const uint8_t> live_owners = {},
                                     uint32_t keeper = kNone,
                                     std::vector<AdoptPin>* pins = nullptr);
  // The same from another core's arena (tests: a copy of a live pool).
  Result<AdoptCounts> adopt_registry(const PoolCore& previous,
                                     std::span<const uint8_t> live_owners = {},
                                     uint32_t keeper = kNone,
                                     std::vector<AdoptPin>* pins = nullptr);
  // This core's arena, read-only.
  ConstArenaRegions regions() const { return as_const(arena_); }

  // ---- reattach after a restart (daemon/previous_clients.hpp) ----
  // Gives owner `to` back what a reattached client held before the restart, out of what
  // `keeper` keeps: `references` > 0: that many new references on active block `ref`
  // (the keeper's own reference stays until release_kept); 0: mutable block `ref`, moved
  // from the keeper's mutable blocks to `to`'s. kInvalidHandle when the block is not in
  // that state or its generation differs; kResourceExhausted when no hold entry is left.
  Status hand_over(uint32_t keeper, uint32_t to, BlockRef ref, uint32_t references);
  // Drops what `keeper` keeps of block `id` (its reference, or the mutable block, which
  // goes free). False when it keeps nothing of it.
  bool release_kept(uint32_t keeper, uint32_t id);

 private:
  Status check_owner(uint32_t owner) const;
  Status check_mutable_handle(uint32_t owner, BlockRef ref) const;
  Status stale_handle(BlockRef ref, uint32_t current) const;  // why ref's generation is wrong
  // kResourceExhausted when `n` new (owner, block) pairs may not find a hold entry.
  Status check_hold_room(size_t n, const char* call, const char* need) const;
  Status check_register_batch(uint32_t owner, std::span<const RegisterItem> items);
  QuotaGate quota_gate() const { return QuotaGate(quota_, name_, holds_, registry_); }
  void recycle(uint32_t owner, uint32_t id);             // mutable -> free
  void take_reference(uint32_t owner, uint32_t id);      // active hit or promotion
  void drop_reference(uint32_t id, uint32_t count = 1);  // refcount-count, inactive at 0
  uint32_t evict();  // the inactive block evicted first leaves the registry
  void register_new(uint32_t owner, const RegisterItem& it);  // the caller's block registers
  void poison(uint32_t id);  // registered -> out of the registry; free now or at last release
  Status adopt_checks(const PreviousArena& previous, std::span<const uint8_t> live_owners,
                      uint32_t keeper) const;
  void adopt_apply(const PreviousArena& previous, const AdoptionPlan& plan, uint32_t keeper);

  ArenaRegions arena_;
  FreeFifo free_;
  InactiveLevels inactive_;
  OwnerHolds holds_;
  Registry registry_;
  OwnerQuota quota_;
  uint32_t pool_index_ = 0;
  std::string name_;
  std::vector<StoredBlock> stored_scratch_;  // grows to the largest batch, then reused
};

}  // namespace kvpool::pool
