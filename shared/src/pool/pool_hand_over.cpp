// Reattach after a restart (daemon/previous_clients.hpp): what adoption kept for a client of
// the previous daemon under the keeper owner goes back to that client, or free.
#include "handle_text.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "write_section.hpp"

namespace kvpool::pool {

Status PoolCore::hand_over(uint32_t keeper, uint32_t to, BlockRef ref, uint32_t references) {
  WriteSection ws(arena_.header->stats.write_seq);
  KVPOOL_RETURN_IF_ERROR(check_owner(keeper));
  KVPOOL_RETURN_IF_ERROR(check_owner(to));
  if (ref.id >= arena_.header->num_blocks)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(ref) + " does not exist in pool '" + name_ + "'");
  BlockMeta& b = arena_.blocks[ref.id];
  if (b.generation != ref.generation) return stale_handle(ref, b.generation);
  if (references == 0) {
    if (b.state != static_cast<uint8_t>(BlockStateCode::kMutable) || b.owner != keeper)
      return Status(ErrorCode::kInvalidHandle,
                    handle_text(ref) + " is not a mutable block kept for a reattaching client");
    holds_.remove_mutable(keeper, ref.id);
    holds_.push_mutable(to, ref.id);
    return Status::ok();
  }
  if (b.state != static_cast<uint8_t>(BlockStateCode::kActive) || holds_.count(keeper, ref.id) == 0)
    return Status(ErrorCode::kInvalidHandle,
                  handle_text(ref) + " is not a registered block kept for a reattaching client");
  if (holds_.count(to, ref.id) == 0 && holds_.free_entries() == 0)
    return Status(ErrorCode::kResourceExhausted,
                  "pool '" + name_ + "' has no reference slot left (raise max_holds)");
  for (uint32_t k = 0; k < references; ++k) holds_.add(to, ref.id);
  b.refcount += references;
  return Status::ok();
}

bool PoolCore::release_kept(uint32_t keeper, uint32_t id) {
  if (!check_owner(keeper).is_ok() || id >= arena_.header->num_blocks) return false;
  const BlockMeta& b = arena_.blocks[id];
  const BlockRef ref{id, b.generation};
  if (b.state == static_cast<uint8_t>(BlockStateCode::kMutable) && b.owner == keeper)
    return release_mutable(keeper, {&ref, 1}).is_ok();
  if (b.state == static_cast<uint8_t>(BlockStateCode::kActive) && holds_.count(keeper, id) > 0)
    return release_immutable(keeper, {&ref, 1}).is_ok();
  return false;
}

}  // namespace kvpool::pool
