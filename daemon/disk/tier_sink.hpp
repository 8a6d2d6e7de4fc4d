// The pool cores' event sink when some pool has a disk tier: every event goes on to the
// event ring's publisher as before, and newly stored blocks also go to their pool's tier,
// which queues them for write-behind (it must not call the core back from inside it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "daemon/disk/disk_tier.hpp"
#include "kvpool/pool/events.hpp"

namespace kvpool::daemon::disk {

class TierSink final : public pool::EventSink {
 public:
  TierSink(pool::EventSink* next, std::vector<DiskTier*> tiers)
      : next_(next), tiers_(std::move(tiers)) {}
  void on_stored(uint32_t pool, std::span<const pool::StoredBlock> blocks) override {
    if (next_ != nullptr) next_->on_stored(pool, blocks);
    if (pool < tiers_.size() && tiers_[pool] != nullptr) tiers_[pool]->on_stored(blocks);
  }
  void on_removed(uint32_t pool, uint64_t sequence_hash) override {
    if (next_ != nullptr) next_->on_removed(pool, sequence_hash);
  }

 private:
  pool::EventSink* next_;
  std::vector<DiskTier*> tiers_;
};

}  // namespace kvpool::daemon::disk
