// Clients of the previous daemon that still ran when this one adopted its pools (issue 15).
// Adoption put what each of them held under the keeper owner (pool_adopt.cpp): nobody else
// may get those blocks while the process that held them can still read or write them.
// This gives them back when the client reattaches (kReclaim), to its new slot, and lets
// them go when it has said what it still holds, or when its process exits.
//
// A reattaching client is taken at its word only for what adoption found it held: the
// previous slot must name the caller's own process (same pid, and the pidfd taken at
// start says that process still runs), and each block it claims must be one that slot
// held, with the same generation, no more references than it had, mutable only if it was
// mutable. Whatever else it claims it does not get back ("lost": it must not use those
// handles). A lost block the slot did hold stays kept until the process exits, since the
// client may still read it through its mapping.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "daemon/adoption.hpp"
#include "daemon/kept_processes.hpp"
#include "kvpool/core/status.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/protocol.hpp"

namespace kvpool::daemon {

class PreviousClients {
 public:
  PreviousClients() = default;
  // `keeper`: the pool-core owner adoption gave their blocks to. `previous_keeper`: the
  // previous daemon's keeper owner, whose pins are kept for the inherited clients (those
  // of `clients` marked so: processes it kept blocks for, daemon/kept_processes.hpp).
  PreviousClients(uint64_t epoch, std::vector<Adoption::LiveClient> clients, uint32_t keeper,
                  size_t num_pools, uint32_t previous_keeper = pool::kNone);

  // What pool `pool`'s adoption pinned (pool::PoolCore::adopt_registry's pins).
  void add_pins(uint32_t pool, std::span<const pool::AdoptPin> pins);

  // kReclaim from the client in slot `owner`, process `pid` of user `uid`, for pool `pool`
  // (of `cores`):
  // gives back what it may take and writes the refs of the items it may not to `lost`
  // (room for items.size()), their number to *lost_count. With kReclaimFinal, what it did
  // not claim in any pool goes back into circulation, and it may not reclaim again. An
  // error (not this client, not this epoch, already finished) gives nothing back.
  Status reclaim(uint32_t owner, pid_t pid, uid_t uid, const proto::ReclaimHeader& h,
                 std::span<pool::PoolCore* const> cores, uint32_t pool,
                 std::span<const proto::ReclaimItem> items, pool::BlockRef* lost,
                 uint32_t* lost_count);

  // Periodic: previous clients whose process exited give up what is still kept for them.
  // Returns the blocks that went back into circulation.
  uint32_t reap(std::span<pool::PoolCore* const> cores);

  size_t waiting() const { return clients_.size(); }
  // The processes this daemon's keeper keeps blocks for (its successor's kept list).
  std::vector<KeptProcess> kept_processes() const;

 private:
  enum class PinState : uint8_t { kOpen, kClaimed, kLost, kSettled };
  // More references than one client may hold on a block by default cannot come from a
  // whole arena: such a pin is never handed back.
  static constexpr uint32_t kMaxClaimableReferences = pool::OwnerQuota{}.max_refs_per_block;
  struct Pin {
    uint32_t generation;
    uint32_t references;  // 0: mutable
    PinState state = PinState::kOpen;
  };
  struct Client {
    Adoption::LiveClient who;
    std::vector<std::unordered_map<uint32_t, Pin>> pins;  // per pool: block -> pin
    bool finished = false;                                // its final reclaim came
  };

  Client* find(uint32_t slot);
  // One holder of pool `pool`'s block `id` no longer needs it kept; the last lets it go.
  uint32_t settle(pool::PoolCore& core, uint32_t pool, uint32_t id);
  // Settles every pin of `c` in state `which`.
  uint32_t settle_all(Client& c, std::span<pool::PoolCore* const> cores, PinState which);

  uint64_t epoch_ = 0;
  uint32_t keeper_ = 0;
  uint32_t previous_keeper_ = pool::kNone;
  std::vector<Client> clients_;
  // Per pool: block -> previous clients that still need it kept.
  std::vector<std::unordered_map<uint32_t, uint32_t>> holders_;
};

}  // namespace kvpool::daemon
