// Turns event-ring records into Dynamo router messages (router_event.hpp), the forwarder's
// whole translation, with no NATS in it (unit-tested alone):
//
// - Stored: one message per register call (a ring batch). The blocks of a message must form
//   a chain, so a batch whose blocks do not (deduplicated blocks in the middle, or unrelated
//   sequences in one call) is split where the chain breaks.
// - Removed: consecutive removals go out as one message (up to kMaxRemovedPerMessage), sent
//   when another kind of record arrives or the ring runs dry (flush()).
// - Cleared: "cleared".
// - A worker with several pools is one worker to the router: a hash is stored when the
//   first pool registers it and removed when the last pool drops it.
// - resync(): "cleared", then the whole registry as stored chains.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/events/router_event.hpp"
#include "kvpool/shm/event_ring.hpp"

namespace kvpool::events {

// A registered block as a snapshot of the pool arenas shows it.
struct RegisteredBlock {
  uint64_t sequence_hash;
  uint64_t block_hash;
  uint64_t parent_hash;  // valid when has_parent
  uint32_t pool;
  bool has_parent;
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

  MessageBuilder(int64_t worker_id, Sink sink) : worker_id_(worker_id), sink_(std::move(sink)) {}

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
  uint64_t next_event_id() const { return next_event_id_; }

 private:
  void send_stored();
  void send_removed();
  void send(const std::string& json);
  void stored_block(uint32_t pool, uint64_t seq, uint64_t block, bool has_parent, uint64_t parent);
  void removed_block(uint32_t pool, uint64_t seq);

  int64_t worker_id_;
  Sink sink_;
  uint64_t next_event_id_ = 1;  // consecutive per forwarder run
  bool in_sync_ = true;
  BuilderStats stats_;
  std::unordered_map<uint64_t, uint32_t> pools_of_;  // sequence hash -> bit per pool holding it
  // The stored message being built: a chain under stored_parent_.
  std::optional<uint64_t> stored_parent_;
  std::vector<StoredHashes> stored_;
  std::vector<uint64_t> removed_;
  std::string json_;  // reused buffer
};

}  // namespace kvpool::events
