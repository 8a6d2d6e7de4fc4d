#include "kvpool/pool/owner_quota.hpp"

#include <unordered_map>

namespace kvpool::pool {

Status check_quota_fits(const OwnerQuota& quota, uint32_t max_owners) {
  if (quota.max_refs_per_block == 0)
    return Status(ErrorCode::kInvalidArgument, "max_refs_per_block must be at least 1");
  if (uint64_t{quota.max_refs_per_block} * max_owners >= (uint64_t{1} << 32))
    return Status(ErrorCode::kInvalidArgument,
                  "max_refs_per_block " + std::to_string(quota.max_refs_per_block) + " x " +
                      std::to_string(max_owners) +
                      " clients could overflow a 32-bit reference count");
  return Status::ok();
}

Status QuotaGate::mutable_blocks(uint32_t held, uint32_t n) const {
  if (q_.max_mutable_blocks == 0 || uint64_t{held} + n <= q_.max_mutable_blocks)
    return Status::ok();
  return Status(ErrorCode::kQuotaExceeded,
                "pool '" + pool_ + "': this client holds " + std::to_string(held) +
                    " mutable blocks, " + std::to_string(n) + " more would pass its quota of " +
                    std::to_string(q_.max_mutable_blocks) + " (max_mutable_blocks)");
}

Status QuotaGate::references(uint64_t held, size_t n, const char* verb) const {
  if (q_.max_references == 0 || held + n <= q_.max_references) return Status::ok();
  return Status(ErrorCode::kQuotaExceeded,
                "pool '" + pool_ + "': this client holds " + std::to_string(held) +
                    " references, a " + verb + " of " + std::to_string(n) +
                    " could pass its quota of " + std::to_string(q_.max_references) +
                    " (max_references)");
}

Status QuotaGate::per_block(uint32_t owner, uint32_t id, uint32_t extra) const {
  const uint64_t held = id == kNone ? 0 : holds_.count(owner, id);
  if (held + extra <= q_.max_refs_per_block) return Status::ok();
  return Status(ErrorCode::kQuotaExceeded,
                "pool '" + pool_ + "': this client would hold more than " +
                    std::to_string(q_.max_refs_per_block) + " references on block " +
                    std::to_string(id) + " (max_refs_per_block)");
}

Status QuotaGate::register_items(uint32_t owner, uint64_t held,
                                 std::span<const proto::RegisterItem> items) const {
  for (const proto::RegisterItem& it : items) {
    if (it.priority > q_.max_priority)
      return Status(ErrorCode::kQuotaExceeded,
                    "pool '" + pool_ + "': priority " + std::to_string(it.priority) +
                        " is above this instance's cap of " + std::to_string(q_.max_priority) +
                        " (max_priority)");
  }
  if (q_.max_references != 0 && held + items.size() > q_.max_references)
    return Status(ErrorCode::kQuotaExceeded,
                  "pool '" + pool_ + "': this client holds " + std::to_string(held) +
                      " references, " + std::to_string(items.size()) +
                      " more would pass its quota of " + std::to_string(q_.max_references) +
                      " (max_references)");
  // Cheap test first; the exact count only for a call that could come near the cap.
  bool near = items.size() > q_.max_refs_per_block;
  for (size_t i = 0; i < items.size() && !near; ++i) {
    uint32_t ex = registry_.find(items[i].sequence_hash);
    near = ex != kNone && holds_.count(owner, ex) + items.size() > q_.max_refs_per_block;
  }
  if (!near) return Status::ok();
  std::unordered_map<uint64_t, uint32_t> per_hash;
  for (const proto::RegisterItem& it : items) ++per_hash[it.sequence_hash];
  for (const auto& [hash, count] : per_hash)
    KVPOOL_RETURN_IF_ERROR(per_block(owner, registry_.find(hash), count));
  return Status::ok();
}

}  // namespace kvpool::pool
