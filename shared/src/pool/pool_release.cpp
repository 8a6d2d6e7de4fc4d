// Releases: mutable blocks back to the free FIFO, references dropped (the last one makes a
// block inactive), and everything an owner held at once (a dead client).
#include "handle_text.hpp"
#include "kvpool/core/counter.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "write_section.hpp"

namespace kvpool::pool {

// Releases are fire-and-forget, and a hostile client can send millions of bad handles:
// a rejection is counted with no allocation; only the first one's message is built.
Status PoolCore::release_mutable(uint32_t owner, std::span<const BlockRef> blocks,
                                 uint32_t* rejected) {
  ArenaHeader& h = *arena_.header;
  WriteSection ws(h.stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  uint32_t bad = 0;
  const BlockRef* first_bad = nullptr;
  for (const BlockRef& r : blocks) {
    const bool ok = r.id < h.num_blocks && arena_.blocks[r.id].generation == r.generation &&
                    arena_.blocks[r.id].state == static_cast<uint8_t>(BlockStateCode::kMutable) &&
                    arena_.blocks[r.id].owner == owner;
    if (!ok) {
      if (bad++ == 0) first_bad = &r;
      continue;
    }
    recycle(owner, r.id);
  }
  if (bad == 0) return Status::ok();
  bump(h.stats.rejected_handles, bad);
  if (rejected) *rejected += bad;
  return check_mutable_handle(owner, *first_bad);  // the first rejection, explained
}

Status PoolCore::release_immutable(uint32_t owner, std::span<const BlockRef> blocks,
                                   uint32_t* rejected) {
  ArenaHeader& h = *arena_.header;
  WriteSection ws(h.stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  uint32_t bad = 0;
  BlockRef first_bad{};
  bool first_dropped = false;  // first_bad named a real active block this owner did not hold
  for (size_t k = blocks.size(); k-- > 0;) {
    BlockRef r = blocks[k];
    const bool named = r.id < h.num_blocks && arena_.blocks[r.id].generation == r.generation &&
                       arena_.blocks[r.id].state == static_cast<uint8_t>(BlockStateCode::kActive);
    if (!named || !holds_.drop(owner, r.id)) {
      if (bad++ == 0) {
        first_bad = r;
        first_dropped = named;
      }
      continue;
    }
    drop_reference(r.id);
    bump(h.stats.released_refs, 1);
  }
  if (bad == 0) return Status::ok();
  bump(h.stats.rejected_handles, bad);
  if (rejected) *rejected += bad;
  const BlockRef r = first_bad;
  if (r.id >= h.num_blocks)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(r) + " does not exist in pool '" + name_ + "'");
  if (!first_dropped && arena_.blocks[r.id].generation != r.generation)
    return stale_handle(r, arena_.blocks[r.id].generation);
  return Status(ErrorCode::kInvalidHandle,
                handle_text(r) + " is not an immutable block held by this client");
}

uint32_t PoolCore::release_owner(uint32_t owner) {
  WriteSection ws(arena_.header->stats.write_seq);
  if (!check_owner(owner).is_ok()) return 0;
  const OwnerRecord& o = arena_.owners[owner];
  uint32_t returned = 0;
  while (o.mutable_head != kNone) {
    recycle(owner, o.mutable_head);
    ++returned;
  }
  while (o.hold_head != kNone) {
    const uint32_t id = arena_.holds[o.hold_head].block;
    // One step per hold record, not per reference: a client's many references on one
    // block go in one subtraction.
    const uint32_t count = holds_.drop_all(owner, id);
    drop_reference(id, count);
    bump(arena_.header->stats.released_refs, count);
    ++returned;
  }
  return returned;
}

}  // namespace kvpool::pool
