#include "kvpool/pool/pool_core.hpp"

#include "handle_text.hpp"
#include "kvpool/core/checksum.hpp"
#include "kvpool/core/counter.hpp"
#include "kvpool/pool/arena_invariants.hpp"
#include "write_section.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace kvpool::pool {

Result<size_t> PoolCore::arena_bytes(const PoolCoreConfig& config) {
  auto o = arena_layout(config);
  if (!o) return o.status();
  return static_cast<size_t>(o->total);
}

Result<PoolCore> PoolCore::create(void* memory, size_t bytes, const PoolCoreConfig& config,
                                  uint32_t pool_index, std::string name) {
  auto o = arena_layout(config);
  if (!o) return o.status();
  if (memory == nullptr || reinterpret_cast<uintptr_t>(memory) % 64 != 0)
    return Status(ErrorCode::kInvalidArgument, "arena memory must be 64-byte aligned");
  if (bytes < o->total)
    return Status(ErrorCode::kInvalidArgument, "arena of " + std::to_string(bytes) +
                                                   " bytes is too small, need " +
                                                   std::to_string(o->total));
  format_arena(memory, config, *o);
  auto core = attach(memory, bytes, pool_index, std::move(name));
  if (!core) return core.status();
  for (uint32_t i = 0; i < config.num_blocks; ++i) core->free_.push(i);
  return core;
}

Status PoolCore::validate(const void* memory, size_t bytes) {
  return validate_arena(memory, bytes);
}

Result<PoolCore> PoolCore::attach(void* memory, size_t bytes, uint32_t pool_index,
                                  std::string name) {
  KVPOOL_RETURN_IF_ERROR(validate_arena(memory, bytes));
  PoolCore p;
  p.arena_ = locate_regions(memory);
  p.free_ = FreeFifo(p.arena_);
  p.inactive_ = InactiveLevels(p.arena_);
  p.holds_ = OwnerHolds(p.arena_);
  p.registry_ = Registry(p.arena_, pool_index);
  p.pool_index_ = pool_index;
  p.name_ = std::move(name);
  return p;
}

void PoolCore::set_generation_tag(uint8_t tag) { arena_.header->generation_tag = tag; }

Status PoolCore::set_quota(const OwnerQuota& quota) {
  KVPOOL_RETURN_IF_ERROR(check_quota_fits(quota, arena_.header->max_owners));
  quota_ = quota;
  return Status::ok();
}

// ---- validation -------------------------------------------------------------------------

Status PoolCore::check_owner(uint32_t owner) const {
  if (owner >= arena_.header->max_owners)
    return Status(ErrorCode::kInvalidArgument, "owner " + std::to_string(owner) +
                                                   " out of range (max_owners " +
                                                   std::to_string(arena_.header->max_owners) + ")");
  return Status::ok();
}

// A handle whose generation is not the block's. Under a daemon (generation tag set) one
// whose tag is neither this daemon's nor the block's was issued by another kvpoold: a
// previous daemon of this instance, or another instance whose pool looks the same.
Status PoolCore::stale_handle(BlockRef ref, uint32_t current) const {
  const uint32_t tag = arena_.header->generation_tag;
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

Status PoolCore::check_mutable_handle(uint32_t owner, BlockRef ref) const {
  if (ref.id >= arena_.header->num_blocks)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(ref) + " does not exist in pool '" + name_ + "' (" +
                      std::to_string(arena_.header->num_blocks) + " blocks)");
  const BlockMeta& b = arena_.blocks[ref.id];
  if (b.generation != ref.generation) return stale_handle(ref, b.generation);
  if (b.state != static_cast<uint8_t>(BlockStateCode::kMutable) || b.owner != owner)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(ref) + " is not a mutable block held by this client");
  return Status::ok();
}

Status PoolCore::check_hold_room(size_t n, const char* call, const char* need) const {
  if (n <= holds_.free_entries()) return Status::ok();
  return Status(ErrorCode::kResourceExhausted,
                "pool '" + name_ + "' has " + std::to_string(holds_.free_entries()) +
                    " reference slots left, " + call + " of " + std::to_string(n) + " " + need +
                    " that many (raise max_holds)");
}

// ---- block moves between the structures -----------------------------------------------

void PoolCore::recycle(uint32_t owner, uint32_t id) {
  holds_.remove_mutable(owner, id);
  free_.push(id);
}

void PoolCore::take_reference(uint32_t owner, uint32_t id) {
  BlockMeta& b = arena_.blocks[id];
  if (b.state == static_cast<uint8_t>(BlockStateCode::kInactive)) {
    inactive_.remove(id);
    b.state = static_cast<uint8_t>(BlockStateCode::kActive);
    b.refcount = 0;
    bump(arena_.header->stats.active_blocks, 1);
  }
  ++b.refcount;
  b.acquired_tick = ++arena_.header->tick;
  holds_.add(owner, id);
}

void PoolCore::drop_reference(uint32_t id, uint32_t count) {
  BlockMeta& b = arena_.blocks[id];
  b.refcount -= count;  // count <= refcount: the holds it drops were counted in it
  if (b.refcount > 0) return;
  bump(arena_.header->stats.active_blocks, -1);
  if (b.flags & kFlagPoisoned) {
    free_.push(id);  // its bytes are bad: nothing may find it again (push clears the flag)
    return;
  }
  b.returned_tick = ++arena_.header->tick;
  inactive_.push(id);
}

uint32_t PoolCore::evict() {
  const uint32_t id = inactive_.pop();
  registry_.remove(arena_.blocks[id].sequence_hash);
  bump(arena_.header->stats.evictions, 1);
  return id;
}

// ---- operations -------------------------------------------------------------------------

Status PoolCore::allocate(uint32_t owner, uint32_t n, BlockRef* out) {
  ArenaHeader& h = *arena_.header;
  WriteSection ws(h.stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  KVPOOL_RETURN_IF_ERROR(quota_gate().mutable_blocks(arena_.owners[owner].mutable_count, n));
  const uint64_t available = uint64_t{free_.size()} + inactive_.size();
  if (n > available)
    return Status(ErrorCode::kNotEnoughBlocks,
                  "pool '" + name_ + "' has " + std::to_string(available) +
                      " free or evictable blocks, " + std::to_string(n) + " requested");
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t id = free_.empty() ? evict() : free_.pop();
    BlockMeta& b = arena_.blocks[id];
    b.generation = next_generation(b.generation, h.generation_tag);
    b.flags = 0;
    b.priority = 0;
    arena_.checksums[id] = kNoChecksum;  // the new owner's bytes have none until it registers
    b.acquired_tick = ++h.tick;
    holds_.push_mutable(owner, id);
    out[i] = BlockRef{id, b.generation};
  }
  bump(h.stats.allocations, n);
  return Status::ok();
}

void PoolCore::register_new(uint32_t owner, const RegisterItem& it) {
  const uint32_t id = it.block.id;
  holds_.remove_mutable(owner, id);
  BlockMeta& b = arena_.blocks[id];
  b.sequence_hash = it.sequence_hash;
  b.block_hash = it.block_hash;
  b.parent_hash = it.has_parent ? it.parent_hash : 0;
  b.flags = it.has_parent ? kFlagHasParent : 0;
  b.priority = it.priority;
  b.state = static_cast<uint8_t>(BlockStateCode::kActive);
  b.refcount = 1;
  arena_.checksums[id] = it.checksum;
  b.acquired_tick = ++arena_.header->tick;
  registry_.insert(it.sequence_hash, id);
  holds_.add(owner, id);
  bump(arena_.header->stats.active_blocks, 1);
  bump(arena_.header->stats.registrations, 1);
}

Status PoolCore::check_register_batch(uint32_t owner, std::span<const RegisterItem> items) {
  // A block twice in one batch is caught by a mark set here and cleared below.
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
    BlockMeta& b = arena_.blocks[it.block.id];
    if (b.flags & kFlagScratch) {
      bad = Status(ErrorCode::kInvalidArgument,
                   handle_text(it.block) + " appears twice in one register call");
      break;
    }
    b.flags |= kFlagScratch;
  }
  for (size_t i = 0; i < marked; ++i) arena_.blocks[items[i].block.id].flags &= ~kFlagScratch;
  if (!bad.is_ok()) bump(arena_.header->stats.rejected_handles, 1);
  return bad;
}

Status PoolCore::register_blocks(uint32_t owner, std::span<const RegisterItem> items, BlockRef* out,
                                 const RegisterTokens& tokens) {
  WriteSection ws(arena_.header->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  // Validate the whole batch first: a bad item changes nothing.
  KVPOOL_RETURN_IF_ERROR(check_register_batch(owner, items));
  KVPOOL_RETURN_IF_ERROR(check_hold_room(items.size(), "register", "needs"));
  KVPOOL_RETURN_IF_ERROR(quota_gate().register_items(owner, arena_.owners[owner].hold_refs, items));

  stored_scratch_.clear();
  for (size_t i = 0; i < items.size(); ++i) {
    const RegisterItem& it = items[i];
    const uint32_t existing = registry_.find(it.sequence_hash);
    if (existing != kNone) {
      // Active or inactive hit: share the registered block, recycle the caller's.
      take_reference(owner, existing);
      recycle(owner, it.block.id);
      bump(arena_.header->stats.register_dedups, 1);
      out[i] = BlockRef{existing, arena_.blocks[existing].generation};
      continue;
    }
    register_new(owner, it);
    const BlockMeta& b = arena_.blocks[it.block.id];
    stored_scratch_.push_back(StoredBlock{it.sequence_hash, it.block_hash, b.parent_hash,
                                          it.priority, it.has_parent != 0, tokens.of(i)});
    out[i] = BlockRef{it.block.id, b.generation};
  }
  registry_.publish_stored(stored_scratch_);
  return Status::ok();
}

Result<BlockRef> PoolCore::hold_registered(uint32_t owner, uint64_t sequence_hash) {
  WriteSection ws(arena_.header->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  if (holds_.free_entries() == 0)
    return Status(ErrorCode::kResourceExhausted,
                  "pool '" + name_ + "' has no reference slot left (raise max_holds)");
  const uint32_t id = registry_.find(sequence_hash);
  if (id == kNone) return Status(ErrorCode::kNotFound, "block is not registered");
  const uint64_t acquired = arena_.blocks[id].acquired_tick;
  take_reference(owner, id);
  arena_.blocks[id].acquired_tick = acquired;  // a daemon hold is no use by a client
  return BlockRef{id, arena_.blocks[id].generation};
}

Result<uint32_t> PoolCore::match(uint32_t owner, std::span<const uint64_t> hashes, BlockRef* out) {
  WriteSection ws(arena_.header->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  KVPOOL_RETURN_IF_ERROR(check_hold_room(hashes.size(), "match", "may need"));
  KVPOOL_RETURN_IF_ERROR(
      quota_gate().references(arena_.owners[owner].hold_refs, hashes.size(), "match"));
  // Three passes over chunks of 64 so the cache misses of a whole chunk overlap: prefetch
  // the registry slots, then look up and prefetch each hit's metadata and hold slot, then
  // take the references. Roughly halves the time of a 64-hash match on a large pool.
  constexpr size_t kChunk = 64;
  uint32_t ids[kChunk];
  uint32_t n = 0;
  for (size_t base = 0; base < hashes.size(); base += kChunk) {
    size_t len = std::min(kChunk, hashes.size() - base);
    for (size_t i = 0; i < len; ++i) registry_.prefetch(hashes[base + i]);
    size_t hit = 0;
    for (; hit < len; ++hit) {
      uint32_t id = registry_.find(hashes[base + hit]);
      if (id == kNone) break;
      ids[hit] = id;
      __builtin_prefetch(&arena_.blocks[id], 1);
      holds_.prefetch(owner, id);
    }
    for (size_t i = 0; i < hit; ++i) {
      if (Status q = quota_gate().per_block(owner, ids[i], 1); !q.is_ok()) {
        // Only a client that repeats hashes gets here: give back what this call took.
        for (uint32_t k = n; k-- > 0;) {
          holds_.drop(owner, out[k].id);
          drop_reference(out[k].id);
        }
        return q;
      }
      take_reference(owner, ids[i]);
      out[n++] = BlockRef{ids[i], arena_.blocks[ids[i]].generation};
    }
    if (hit < len) break;
  }
  bump(arena_.header->stats.match_queries, hashes.size());
  bump(arena_.header->stats.match_hits, n);
  return n;
}

PoolCounts PoolCore::counts() const {
  const PoolStats& s = arena_.header->stats;
  return PoolCounts{arena_.header->num_blocks, s.free_blocks.load(std::memory_order_relaxed),
                    s.mutable_blocks.load(std::memory_order_relaxed),
                    s.active_blocks.load(std::memory_order_relaxed),
                    s.inactive_blocks.load(std::memory_order_relaxed)};
}

Status PoolCore::check_invariants() const { return check_arena_invariants(regions()); }

}  // namespace kvpool::pool
