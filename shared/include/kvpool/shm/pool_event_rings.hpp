// The event rings of every pool a reader may read, read as one stream (kvpoolctl events,
// kvpool-events). Each pool has its own ring in its registry segment (registry_segment.hpp),
// with its own event ids, so that only the pool's clients read its events; a reader allowed
// several pools (root, the daemon's uid, a tenant with two pools) tails them all here.
//
// Order: within a pool, the ring's order; a batch (one register call) is returned whole
// before another pool's records; across pools, in turn. Records carry their pool index
// (EventPayload::pool), so a consumer needs nothing else to tell them apart.
#pragma once

#include <cstdint>
#include <vector>

#include "kvpool/core/status.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/event_ring.hpp"

namespace kvpool::shm {

class PoolEventRings {
 public:
  using Outcome = EventRingReader::Outcome;

  PoolEventRings() = default;
  // A reader of the ring of each pool `control` holds the registry of (has_pool) and that
  // has one, from its oldest record. kUnsupported when there is none (the daemon runs
  // without event rings, or this caller may read no pool).
  static Result<PoolEventRings> open(const ControlReader& control);

  // The next record of any ring. kLapped: one ring lapped this reader; lost() records of it
  // were skipped (the reader has moved past them). kEmpty: nothing new in any ring.
  Outcome next(EventRecord* out);
  uint64_t lost() const { return lost_; }
  // The token ids of `record` (from next()), exactly or none: EventRingReader::read_tokens.
  bool read_tokens(const EventRecord& record, std::vector<uint32_t>* out) const;
  // Its key, exactly or none: EventRingReader::read_key.
  bool read_key(const EventRecord& record, std::vector<std::byte>* out) const;

  // One id per ring (in ring order): what each producer has published so far, and where
  // this reader stands in each.
  std::vector<uint64_t> published() const;
  std::vector<uint64_t> positions() const;
  // Moves each ring to its id (as EventRingReader::seek); `ids` as published() returns them.
  void seek(const std::vector<uint64_t>& ids);
  void seek_to_start();  // every ring from its oldest record
  void seek_to_end();    // only new records from here on
  // Each ring `last` records before what it has published (or its oldest).
  void seek_back(uint64_t last);
  // Records published and not yet read, over all rings.
  uint64_t lag() const;
  // Whether this reader has read up to `marks` (a published() taken earlier) in every ring.
  bool reached(const std::vector<uint64_t>& marks) const;
  uint32_t capacity() const { return rings_.empty() ? 0 : rings_[0].reader.capacity(); }
  size_t size() const { return rings_.size(); }

 private:
  struct Ring {
    uint32_t pool;
    EventRingReader reader;
  };
  std::vector<Ring> rings_;
  size_t current_ = 0;     // the ring read next
  bool in_batch_ = false;  // current_ returned a batch's first record and not yet its last
  uint64_t lost_ = 0;
};

}  // namespace kvpool::shm
