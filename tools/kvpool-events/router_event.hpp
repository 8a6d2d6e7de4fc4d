// Dynamo's KV router event, as JSON on NATS (docs/design.md §7, docs/events.md). Dynamo 0.2.1's
// form, which EventSource{worker_id} alone still produces byte for byte:
//
//   {"worker_id":W,"event":{"event_id":N,"data":{"stored":{"parent_hash":P|null,
//       "blocks":[{"block_hash":SEQ,"tokens_hash":BLOCK},...]}}}}
//   {"worker_id":W,"event":{"event_id":N,"data":{"removed":{"block_hashes":[SEQ,...]}}}}
//   {"worker_id":W,"event":{"event_id":N,"data":"cleared"}}
//
// and today's RouterEvent (Dynamo's kv-router protocols.rs), which kvpool-events sends:
//
//   {"worker_id":W,"storage_tier":"host_pinned"|"device"|"disk",
//    "residency_domain":"worker"|"cache_owner",
//    "event":{"event_id":N,"dp_rank":R,"data":...},
//    "state_source":{...},           (cache_owner only: Dynamo's CacheOwnerId, an object)
//    "hash_scheme":"dynamo-0.2"}     (kvpool's: how the hashes were made, core/hash.hpp)
//
// state_source is Option<CacheOwnerId> in Dynamo (lib/kv-router/src/protocols.rs, commit
// 038eab23a6b6e9b6391de6640f4f69d4c2726681), and CacheOwnerId is a serde struct (a PoolId and
// a StableDpSlotId, each made of 16-byte digests): a JSON string there fails to deserialise
// and Dynamo drops the whole event. kvpool cannot derive that identity itself (Dynamo
// digests its own identity material with BLAKE3), so it sends the object the operator
// configured (kvpool-events --state-source), verbatim, and nothing when none is configured.
// A cache_owner event without a state_source is refused by Dynamo's residency_owner(), so
// without one kvpool-events speaks as "worker" (the form every Dynamo accepts).
//
// Every field Dynamo added has a default on its side, and it ignores fields it does not
// know, so both forms decode everywhere. "block_hash" is the sequence hash (the whole
// prefix), "tokens_hash" the block-local hash; the blocks of one stored event form a chain
// (each block's parent is the one before it; the first's is parent_hash).
//
// Subject: namespace.{ns}.component.{component}.{topic}, topic "kv-events" (Dynamo's
// KV_EVENT_SUBJECT today) or "kv_events" (Dynamo 0.2.1's).
//
// kvpool adds one subject of its own, <subject>.resync: a router that (re)connects
// publishes {} (every worker) or {"worker_id":W} there, and the forwarders answer with
// "cleared" followed by their whole registry as stored events.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvpool/core/status.hpp"

namespace kvpool::events {

struct StoredHashes {
  uint64_t block_hash;   // sequence hash
  uint64_t tokens_hash;  // block-local hash
  friend bool operator==(const StoredHashes&, const StoredHashes&) = default;
};

// Who sends an event, and about which memory. Empty strings and a missing dp_rank are left
// out of the JSON (Dynamo 0.2.1's form).
struct EventSource {
  int64_t worker_id = 0;
  std::optional<uint32_t> dp_rank;
  std::string_view storage_tier;      // "host_pinned" | "device" | "disk"
  std::string_view residency_domain;  // "cache_owner" | "worker"
  // cache_owner: Dynamo's CacheOwnerId of the cache (a JSON object; null or absent: none).
  const nlohmann::ordered_json* state_source = nullptr;
  std::string_view hash_scheme;  // "dynamo-0.2" | "dynamo-router"
  EventSource() = default;
  // Dynamo 0.2.1's form: the worker alone.
  EventSource(int64_t worker) : worker_id(worker) {}  // NOLINT: implicit on purpose
};

inline constexpr std::string_view kDefaultTopic = "kv-events";  // Dynamo today
inline constexpr std::string_view kLegacyTopic = "kv_events";   // Dynamo 0.2.1
inline constexpr std::string_view kTierHostPinned = "host_pinned";
inline constexpr std::string_view kTierDevice = "device";
inline constexpr std::string_view kTierDisk = "disk";  // a host pool's disk tier
inline constexpr std::string_view kDomainCacheOwner = "cache_owner";
inline constexpr std::string_view kDomainWorker = "worker";

struct RouterEvent {
  enum class Kind { kStored, kRemoved, kCleared };
  int64_t worker_id = 0;
  uint64_t event_id = 0;
  Kind kind = Kind::kCleared;
  std::optional<uint64_t> parent_hash;  // kStored
  std::vector<StoredHashes> blocks;     // kStored
  std::vector<uint64_t> block_hashes;   // kRemoved
  // Today's envelope ("" / nullopt when absent: Dynamo 0.2.1's form).
  std::optional<uint32_t> dp_rank;
  std::string storage_tier;
  std::string residency_domain;
  std::string state_source;  // the CacheOwnerId object as compact JSON
  std::string hash_scheme;
};

std::string kv_events_subject(std::string_view ns, std::string_view component,
                              std::string_view topic = kDefaultTopic);
std::string resync_subject(std::string_view ns, std::string_view component,
                           std::string_view topic = kDefaultTopic);

// Append one event's JSON to `out` (no separator, no newline).
void append_stored_json(std::string& out, const EventSource& source, uint64_t event_id,
                        std::optional<uint64_t> parent_hash, std::span<const StoredHashes> blocks);
void append_removed_json(std::string& out, const EventSource& source, uint64_t event_id,
                         std::span<const uint64_t> block_hashes);
void append_cleared_json(std::string& out, const EventSource& source, uint64_t event_id);

// Parses one router event; kInvalidArgument naming what is wrong for anything else.
Result<RouterEvent> parse_router_event(std::string_view json);

// A resync request's worker (nullopt: every worker); kInvalidArgument when malformed.
Result<std::optional<int64_t>> parse_resync_request(std::string_view json);

}  // namespace kvpool::events
