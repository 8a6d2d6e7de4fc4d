// The pool core's side of opaque keys (DESIGN.md §6b): a per-hash lookup without match's
// prefix stop, and removal of a registered block by a client that holds it. The key itself
// never reaches the daemon: the client checks it in the block (libclient/src/key_block.hpp).
#include <string>

#include "kvpool/core/counter.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "write_section.hpp"

namespace kvpool::pool {

Result<uint32_t> PoolCore::lookup(uint32_t owner, std::span<const uint64_t> hashes, BlockRef* out) {
  WriteSection ws(header_->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  // The same bounds as match: every hash may hit.
  if (hashes.size() > holds_free())
    return Status(ErrorCode::kResourceExhausted,
                  "pool '" + name_ + "' has " + std::to_string(holds_free()) +
                      " reference slots left, lookup of " + std::to_string(hashes.size()) +
                      " may need that many (raise max_holds)");
  if (quota_.max_references != 0 &&
      owners_[owner].hold_refs + hashes.size() > quota_.max_references)
    return Status(ErrorCode::kQuotaExceeded,
                  "pool '" + name_ + "': this client holds " +
                      std::to_string(owners_[owner].hold_refs) + " references, a lookup of " +
                      std::to_string(hashes.size()) + " could pass its quota of " +
                      std::to_string(quota_.max_references) + " (max_references)");
  for (uint64_t h : hashes) table_.prefetch(h);
  uint32_t hits = 0;
  for (size_t i = 0; i < hashes.size(); ++i) {
    const uint32_t id = table_.find(hashes[i]);
    if (id == kNone) {
      out[i] = BlockRef{proto::kNoBlock, 0};
      continue;
    }
    if (Status q = check_block_quota(owner, id, 1); !q.is_ok()) {
      // Only a client that repeats a hash gets here: give back what this call took.
      for (size_t k = i; k-- > 0;) {
        if (out[k].id == proto::kNoBlock) continue;
        drop_hold(owner, out[k].id);
        drop_reference(out[k].id);
      }
      return q;
    }
    take_reference(owner, id);
    out[i] = BlockRef{id, blocks_[id].generation};
    ++hits;
  }
  bump(header_->stats.match_queries, hashes.size());
  bump(header_->stats.match_hits, hits);
  return hits;
}

Status PoolCore::remove(uint32_t owner, std::span<const BlockRef> refs, BlockRef* out) {
  WriteSection ws(header_->stats.write_seq);
  // Every handle first: a bad one removes nothing.
  for (const BlockRef& r : refs) KVPOOL_RETURN_IF_ERROR(check_held(owner, r));
  for (size_t i = 0; i < refs.size(); ++i) {
    const uint32_t id = refs[i].id;
    // Held, so active; poisoned when an earlier remove (or a checksum) took it out already.
    if (blocks_[id].flags & kFlagPoisoned) {
      out[i] = BlockRef{proto::kNoBlock, 0};
      continue;
    }
    poison(id);  // out of the registry now, free at its last release
    out[i] = refs[i];
  }
  return Status::ok();
}

}  // namespace kvpool::pool
