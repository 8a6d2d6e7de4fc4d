// Dynamo's KV router event, as JSON on NATS (DESIGN.md §7, REFERENCES.md):
//
//   {"worker_id":W,"event":{"event_id":N,"data":{"stored":{"parent_hash":P|null,
//       "blocks":[{"block_hash":SEQ,"tokens_hash":BLOCK},...]}}}}
//   {"worker_id":W,"event":{"event_id":N,"data":{"removed":{"block_hashes":[SEQ,...]}}}}
//   {"worker_id":W,"event":{"event_id":N,"data":"cleared"}}
//
// on subject namespace.{ns}.component.{component}.kv_events. "block_hash" is the sequence
// hash (the whole prefix), "tokens_hash" the block-local hash; the blocks of one stored
// event form a chain (each block's parent is the one before it; the first's is parent_hash).
//
// kvpool adds one subject of its own, namespace.{ns}.component.{component}.kv_events.resync:
// a router that (re)connects publishes {} (every worker) or {"worker_id":W} there, and the
// forwarders answer with "cleared" followed by their whole registry as stored events.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/core/status.hpp"

namespace kvpool::events {

struct StoredHashes {
  uint64_t block_hash;   // sequence hash
  uint64_t tokens_hash;  // block-local hash
  friend bool operator==(const StoredHashes&, const StoredHashes&) = default;
};

struct RouterEvent {
  enum class Kind { kStored, kRemoved, kCleared };
  int64_t worker_id = 0;
  uint64_t event_id = 0;
  Kind kind = Kind::kCleared;
  std::optional<uint64_t> parent_hash;  // kStored
  std::vector<StoredHashes> blocks;     // kStored
  std::vector<uint64_t> block_hashes;   // kRemoved
};

std::string kv_events_subject(std::string_view ns, std::string_view component);
std::string resync_subject(std::string_view ns, std::string_view component);

// Append one event's JSON to `out` (no separator, no newline).
void append_stored_json(std::string& out, int64_t worker_id, uint64_t event_id,
                        std::optional<uint64_t> parent_hash, std::span<const StoredHashes> blocks);
void append_removed_json(std::string& out, int64_t worker_id, uint64_t event_id,
                         std::span<const uint64_t> block_hashes);
void append_cleared_json(std::string& out, int64_t worker_id, uint64_t event_id);

// Parses one router event; kInvalidArgument naming what is wrong for anything else.
Result<RouterEvent> parse_router_event(std::string_view json);

// A resync request's worker (nullopt: every worker); kInvalidArgument when malformed.
Result<std::optional<int64_t>> parse_resync_request(std::string_view json);

}  // namespace kvpool::events
