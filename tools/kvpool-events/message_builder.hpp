// Turns event-ring records into Dynamo router messages (router_event.hpp), the forwarder's
// whole translation, with no NATS in it (unit-tested alone):
//
// - Stored: one message per register call (a ring batch). The blocks of a message must form
//   a chain, so a batch whose blocks do not (deduplicated blocks in the middle, or unrelated
//   sequences in one call) is split where the chain breaks.
// - Removed: consecutive removals go out as one message (up to kMaxRemovedPerMessage), sent
//   when another kind of record arrives or the ring runs dry (flush()).
// - Cleared: "cleared".
// - A worker with several pools of one storage tier is one cache to the router: a hash is
//   stored when the first pool of the tier registers it and removed when the last one drops
//   it. Host and device pools are told apart (storage_tier "host_pinned" / "device").
// - A pool's disk tier (records flagged kEventTierDisk) is a tier of its own, "disk": the
//   same hash may be stored in host memory and on disk, and leaving one says nothing about
//   the other. Dynamo 0.2.1's envelope has no tier: disk records are not sent in it.
// - Host pools speak for a shared cache (residency_domain "cache_owner" with the identity's
//   state_source, Dynamo's CacheOwnerId) when the identity says so; otherwise, and device
//   pools always, as "worker" (Dynamo refuses cache_owner stores in device memory).
// - resync(): "cleared" (one per residency domain in use), then the whole registry as
//   stored chains.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvpool/shm/event_ring.hpp"
#include "tools/kvpool-events/pool_meta.hpp"
#include "tools/kvpool-events/router_event.hpp"

namespace kvpool::events {

// A registered block as a snapshot of the pool arenas shows it.
struct RegisteredBlock {
  uint64_t sequence_hash;
  uint64_t block_hash;
  uint64_t parent_hash;  // valid when has_parent
  uint32_t pool;
  bool has_parent;
  bool disk = false;  // on the pool's disk tier (not in its memory)
};

// How this forwarder introduces itself to the router (RouterEvent's envelope).
struct RouterIdentity {
  int64_t worker_id = 0;
  uint32_t dp_rank = 0;
  // Host pools as a shared cache ("cache_owner", with state_source), else "worker".
  bool cache_owner = false;
  // Dynamo's CacheOwnerId of this cache, the JSON object Dynamo deserialises (router_event.hpp).
  nlohmann::ordered_json state_source;
};

struct BuilderStats {
  uint64_t records = 0;
  uint64_t messages = 0;
  uint64_t stored_blocks = 0;
  uint64_t removed_blocks = 0;
  uint64_t cleared = 0;
  uint64_t resyncs = 0;
};

class MessageBuilder {
 public:
  static constexpr size_t kMaxBlocksPerMessage = 512;
  static constexpr size_t kMaxRemovedPerMessage = 1024;
  // Called with each finished message (JSON). Returns false when it could not be sent.
  using Sink = std::function<bool(std::string_view json)>;

  // Dynamo 0.2.1's envelope (the worker id alone) until set_identity().
  MessageBuilder(int64_t worker_id, Sink sink) : sink_(std::move(sink)) {
    identity_.worker_id = worker_id;
  }
  // Today's envelope: storage_tier, residency_domain, dp_rank, state_source, hash_scheme.
  void set_identity(RouterIdentity identity) {
    identity_ = std::move(identity);
    full_envelope_ = true;
  }
  // The daemon's pools (index = the ring's pool field). Call on every attach.
  void set_pools(std::vector<PoolMeta> pools) { pools_ = std::move(pools); }

  // Feeds the next ring record (in event id order, without gaps; after a gap call resync()).
  void add(const shm::EventRecord& record);
  // Sends a pending run of removals (call when the ring has nothing more for now).
  void flush();
  // Forgets everything pending and known, sends "cleared", then `blocks` as stored chains.
  void resync(std::span<const RegisteredBlock> blocks);

  // False once a message could not be sent since the last resync(): the router's view is
  // then incomplete and a resync is due.
  bool in_sync() const { return in_sync_; }
  const BuilderStats& stats() const { return stats_; }
  // Hashes the router is told this worker holds.
  size_t known_blocks() const { return pools_of_.size(); }

 private:
  void send_stored();
  void send_removed();
  void send(const std::string& json);
  // `disk`: the record is about the pool's disk tier, not its memory.
  void stored_block(uint32_t pool, bool disk, uint64_t seq, uint64_t block, bool has_parent,
                    uint64_t parent);
  void removed_block(uint32_t pool, bool disk, uint64_t seq);
  void send_cleared();
  void resync_tier(std::span<const RegisteredBlock> blocks);
  // The envelope of an event about `pool`'s memory (or its disk tier).
  EventSource source(uint32_t pool, bool disk = false) const;
  // Bits of the caches (a pool's memory, or its disk tier) that share that one's storage tier.
  uint64_t tier_mask(uint32_t pool, bool disk) const;

  RouterIdentity identity_;
  bool full_envelope_ = false;
  std::vector<PoolMeta> pools_;
  Sink sink_;
  uint64_t next_event_id_ = 1;  // consecutive per forwarder run
  bool in_sync_ = true;
  BuilderStats stats_;
  // Sequence hash -> a bit per cache holding it: pool i's memory is bit i, its disk tier bit
  // 32 + i (pools from 31 on share the last bit of each half).
  std::unordered_map<uint64_t, uint64_t> pools_of_;
  // The stored message being built: a chain under stored_parent_.
  std::optional<uint64_t> stored_parent_;
  std::vector<StoredHashes> stored_;
  uint32_t stored_pool_ = 0;
  bool stored_disk_ = false;
  std::vector<uint64_t> removed_;
  uint32_t removed_pool_ = 0;
  bool removed_disk_ = false;
  std::string json_;  // reused buffer
};

}  // namespace kvpool::events
