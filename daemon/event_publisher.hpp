// The daemon's EventSink: turns the pool cores' Stored / Removed calls into records of the
// pool's own event ring, in its registry segment (one batch per register call), so only
// that pool's clients read them. Runs on the progress
// engine, never waits (the ring overwrites what slow readers did not read).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "daemon/disk/disk_events.hpp"
#include "kvpool/pool/events.hpp"
#include "kvpool/shm/event_ring.hpp"

namespace kvpool::daemon {

// It also records the disk tiers' Stored / Removed (flagged kEventTierDisk) in the same ring,
// so one reader sees both tiers of a pool in the order they changed.
class EventPublisher final : public pool::EventSink, public disk::DiskEventSink {
 public:
  // One ring per pool, in pool order.
  explicit EventPublisher(std::vector<shm::EventRingWriter> writers)
      : writers_(std::move(writers)) {}

  void on_stored(uint32_t pool, std::span<const pool::StoredBlock> blocks) override;
  void on_removed(uint32_t pool, uint64_t sequence_hash) override;
  void on_disk_stored(uint32_t pool, std::span<const pool::StoredBlock> blocks) override;
  void on_disk_removed(uint32_t pool, uint64_t sequence_hash) override;

 private:
  void stored(uint32_t pool, std::span<const pool::StoredBlock> blocks, uint8_t tier_flag);
  void removed(uint32_t pool, uint64_t sequence_hash, uint8_t tier_flag);

  std::vector<shm::EventRingWriter> writers_;
  std::vector<shm::EventPayload> scratch_;         // grows to the largest batch, then reused
  std::vector<std::span<const uint32_t>> tokens_;  // the batch's token ids, per record
  std::vector<std::span<const std::byte>> keys_;   // the batch's keys, per record
};

}  // namespace kvpool::daemon
