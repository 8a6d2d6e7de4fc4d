// What a disk tier tells routers (docs/disk-tier.md "Events"): a block became findable on
// disk (its write is durable and the slot published) or stopped being findable (its slot
// evicted for a newer block, or dropped after a failed checksum or read). Separate from the
// pool core's EventSink: a block can be in host memory and on disk at once, and each tier
// has its own Stored and Removed (the event ring flags these kEventTierDisk).
#pragma once

#include <cstdint>
#include <span>

#include "kvpool/pool/events.hpp"

namespace kvpool::daemon::disk {

class DiskEventSink {
 public:
  virtual ~DiskEventSink() = default;
  // One batch: the slots one completion round published, or the whole index a start rebuilt
  // from the file (parents before children). `tokens` are always empty.
  virtual void on_disk_stored(uint32_t pool, std::span<const pool::StoredBlock> blocks) = 0;
  virtual void on_disk_removed(uint32_t pool, uint64_t sequence_hash) = 0;
};

}  // namespace kvpool::daemon::disk
