// Per-block checksums (kvpool/core/checksum.hpp): the daemon hashes a registered block's
// bytes and tells the core; a mismatch poisons the block.
#include "handle_text.hpp"
#include "kvpool/core/counter.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "write_section.hpp"

namespace kvpool::pool {

bool PoolCore::registered(uint32_t id) const {
  const BlockMeta& b = arena_.blocks[id];
  return (b.state == static_cast<uint8_t>(BlockStateCode::kActive) ||
          b.state == static_cast<uint8_t>(BlockStateCode::kInactive)) &&
         (b.flags & kFlagPoisoned) == 0;
}

Status PoolCore::check_held(uint32_t owner, BlockRef ref) const {
  KVPOOL_RETURN_IF_ERROR(check_owner(owner));
  if (ref.id >= arena_.header->num_blocks)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(ref) + " does not exist in pool '" + name_ + "'");
  const BlockMeta& b = arena_.blocks[ref.id];
  if (b.generation != ref.generation) return stale_handle(ref, b.generation);
  if (b.state != static_cast<uint8_t>(BlockStateCode::kActive) || holds_.count(owner, ref.id) == 0)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(ref) + " is not an immutable block held by this client");
  return Status::ok();
}

proto::ChecksumOutcome PoolCore::record_checksum(uint32_t id, uint64_t computed) {
  WriteSection ws(arena_.header->stats.write_seq);
  bump(arena_.header->stats.checksum_verified, 1);
  if (computed == arena_.checksums[id]) return proto::ChecksumOutcome::kOk;
  bump(arena_.header->stats.checksum_mismatches, 1);
  poison(id);
  return proto::ChecksumOutcome::kMismatch;
}

void PoolCore::poison(uint32_t id) {
  BlockMeta& b = arena_.blocks[id];
  // Out of the registry first, as an eviction: no match or register can return it again,
  // and subscribers hear that the hash is gone.
  registry_.remove(b.sequence_hash);
  if (b.state == static_cast<uint8_t>(BlockStateCode::kInactive)) {
    inactive_.remove(id);
    free_.push(id);
    return;
  }
  // Active: others read it now. Taking it from them would make their handles fail at
  // release; they keep it until their last reference goes (drop_reference frees it).
  b.flags |= kFlagPoisoned;
}

}  // namespace kvpool::pool
