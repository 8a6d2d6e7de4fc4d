// The pool core's side of opaque keys (docs/design.md §6b): a per-hash lookup without match's
// prefix stop, and removal of a registered block by a client that holds it. The key itself
// never reaches the daemon: the client checks it in the block (libclient/src/key_block.hpp).
#include <string>

#include "kvpool/core/counter.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "write_section.hpp"

namespace kvpool::pool {

Result<uint32_t> PoolCore::lookup(uint32_t owner, std::span<const uint64_t> hashes, BlockRef* out) {
  WriteSection ws(arena_.header->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  // The same bounds as match: every hash may hit.
  KVPOOL_RETURN_IF_ERROR(check_hold_room(hashes.size(), "lookup", "may need"));
  KVPOOL_RETURN_IF_ERROR(
      quota_gate().references(arena_.owners[owner].hold_refs, hashes.size(), "lookup"));
  for (uint64_t h : hashes) registry_.prefetch(h);
  uint32_t hits = 0;
  for (size_t i = 0; i < hashes.size(); ++i) {
    const uint32_t id = registry_.find(hashes[i]);
    if (id == kNone) {
      out[i] = BlockRef{proto::kNoBlock, 0};
      continue;
    }
    if (Status q = quota_gate().per_block(owner, id, 1); !q.is_ok()) {
      // Only a client that repeats a hash gets here: give back what this call took.
      for (size_t k = i; k-- > 0;) {
        if (out[k].id == proto::kNoBlock) continue;
        holds_.drop(owner, out[k].id);
        drop_reference(out[k].id);
      }
      return q;
    }
    take_reference(owner, id);
    out[i] = BlockRef{id, arena_.blocks[id].generation};
    ++hits;
  }
  bump(arena_.header->stats.match_queries, hashes.size());
  bump(arena_.header->stats.match_hits, hits);
  return hits;
}

Status PoolCore::remove(uint32_t owner, std::span<const BlockRef> refs, BlockRef* out) {
  WriteSection ws(arena_.header->stats.write_seq);
  // Every handle first: a bad one removes nothing.
  for (const BlockRef& r : refs) KVPOOL_RETURN_IF_ERROR(check_held(owner, r));
  for (size_t i = 0; i < refs.size(); ++i) {
    const uint32_t id = refs[i].id;
    // Held, so active; poisoned when an earlier remove (or a checksum) took it out already.
    if (arena_.blocks[id].flags & kFlagPoisoned) {
      out[i] = BlockRef{proto::kNoBlock, 0};
      continue;
    }
    poison(id);  // out of the registry now, free at its last release
    out[i] = refs[i];
  }
  return Status::ok();
}

}  // namespace kvpool::pool
