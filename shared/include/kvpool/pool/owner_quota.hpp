// What one owner (client) may hold in one pool, and the checks that enforce it, so that no
// client can take every block, exhaust the reference table, or wrap a reference count. Every
// refusal is kQuotaExceeded naming the config field that bounds it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kvpool/core/status.hpp"
#include "kvpool/pool/owner_holds.hpp"
#include "kvpool/pool/registry.hpp"
#include "kvpool/shm/protocol.hpp"

namespace kvpool::pool {

// 0 in the max_* fields means "no limit beyond the pool's own capacity".
struct OwnerQuota {
  uint32_t max_mutable_blocks = 0;  // mutable blocks held at once
  uint64_t max_references = 0;      // immutable references held at once (sum over blocks)
  // References one owner may hold on one block. Never unlimited: with it, a block's
  // refcount is at most max_owners * max_refs_per_block, which must fit 32 bits.
  uint32_t max_refs_per_block = 1024;
  uint32_t max_priority = 0xFFFFFFFFu;  // registrations above it are refused
  friend bool operator==(const OwnerQuota&, const OwnerQuota&) = default;
};

// kInvalidArgument when `quota` could let max_owners owners wrap a 32-bit refcount.
Status check_quota_fits(const OwnerQuota& quota, uint32_t max_owners);

// The quota checks of one pool call, over what owners hold now. A short-lived view: it keeps
// a copy of the quota and refers to the pool's name, holds and registry, which outlive it.
class QuotaGate {
 public:
  QuotaGate(const OwnerQuota& quota, const std::string& pool, const OwnerHolds& holds,
            const Registry& registry)
      : q_(quota), pool_(pool), holds_(holds), registry_(registry) {}

  // `held` mutable blocks now, `n` more asked for.
  Status mutable_blocks(uint32_t held, uint32_t n) const;
  // `held` references now; a `verb` ("match", "lookup") of n hashes may take n more.
  Status references(uint64_t held, size_t n, const char* verb) const;
  // `owner` would take `extra` more references on block `id` (kNone: not registered yet).
  Status per_block(uint32_t owner, uint32_t id, uint32_t extra) const;
  // A register call, all or nothing: priority cap, references in total (`held` now), and
  // per block (this call's items counted per hash: the first of a new hash registers the
  // caller's block, each further one shares it).
  Status register_items(uint32_t owner, uint64_t held,
                        std::span<const proto::RegisterItem> items) const;

 private:
  const OwnerQuota q_;
  const std::string& pool_;
  const OwnerHolds& holds_;
  const Registry& registry_;
};

}  // namespace kvpool::pool
