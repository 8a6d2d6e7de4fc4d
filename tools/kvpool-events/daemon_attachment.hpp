// A read-only attachment to one running kvpoold, as kvpool-events needs it: the control
// segment and the registry segments of the pools this process may read (through
// shm::observe, like kvpoolctl; the pools' allow-lists decide, root and the daemon's uid read
// all), their event rings as one stream, and consistent snapshots of their registries.
// Nothing here can write to the daemon's memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvpool/core/status.hpp"
#include "kvpool/shm/control_segment.hpp"
#include "kvpool/shm/event_ring.hpp"
#include "kvpool/shm/pool_event_rings.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "tools/kvpool-events/message_builder.hpp"
#include "tools/kvpool-events/pool_meta.hpp"

namespace kvpool::events {

struct RegistrySnapshot {
  std::vector<RegisteredBlock> blocks;  // every readable pool's active and inactive blocks
  // Replay each ring from its id here (PoolEventRings::seek) on top of the snapshot: every
  // change the copy may have missed (or half-seen) has an event at or after it.
  std::vector<uint64_t> resume_ids;
  uint32_t attempts = 0;
  // Every pool was copied between two calls of the daemon (its write sequence even and
  // unchanged) and passed check_invariants. False: the daemon was never quiet for long
  // enough, and the copy is best effort (the replay from resume_id repairs membership).
  bool consistent = false;
};

// What the pools' disk tiers hold as their events tell it: pool -> sequence hash -> block.
// The disk index lives only in kvpoold's memory, and kvpoold announces all of it as its
// first ring records (docs/disk-tier.md "Events"), so a reader that folds every disk record
// from a daemon's first one on knows exactly what is on disk.
using DiskView = std::vector<std::unordered_map<uint64_t, RegisteredBlock>>;
// Folds one ring record (a disk tier's Stored / Removed; others are ignored) into *view.
void fold_disk_record(const shm::EventRecord& record, DiskView* view);

class DaemonAttachment {
 public:
  // kNotFound when no kvpoold serves the instance; kUnsupported when it has no event ring
  // this process may read.
  static Result<std::unique_ptr<DaemonAttachment>> attach(const std::string& instance,
                                                          const std::string& runtime_dir);

  shm::PoolEventRings& ring() { return ring_; }
  // False once the daemon is stopping or its process is gone (a restarted daemon has a new
  // control segment: attach again).
  bool daemon_alive() const;
  int64_t daemon_pid() const { return control_.header().daemon_pid; }
  // The daemon's start epoch (0 from a daemon that publishes none): a new one means a new
  // registry, which the forwarder answers with a full resync.
  uint64_t daemon_epoch() const { return control_.epoch(); }
  uint32_t num_pools() const { return control_.num_pools(); }
  // Who this daemon succeeded and what it adopted (ControlHeader::restart).
  const shm::RestartInfo& restart() const { return control_.header().restart; }
  const shm::PoolInfo& pool_info(uint32_t i) const { return control_.pool_info(i); }
  // What the event formats need of each pool (storage, page size, hash scheme).
  std::vector<PoolMeta> pool_metas() const;

  // Copies every pool arena out of the segment and reads the registered blocks from the
  // copies. Tries up to `max_attempts` times for a consistent copy (see RegistrySnapshot).
  Result<RegistrySnapshot> snapshot(uint32_t max_attempts = 64);
  // Folds the disk records of each ring from `from` up to (not including) `until` (one id
  // per ring, as PoolEventRings::positions() gives them) into *view, with readers of its
  // own. Returns how many records of that range the rings no longer held (0: exact); every
  // Removed after a Stored it read is read too, so a lossy fold adds no block not on disk.
  uint64_t fold_disk_records(const std::vector<uint64_t>& from, const std::vector<uint64_t>& until,
                             DiskView* view) const;

 private:
  DaemonAttachment() = default;

  shm::ControlReader control_;
  shm::PoolEventRings ring_;
};

}  // namespace kvpool::events
