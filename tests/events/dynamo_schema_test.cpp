// kvpool's router events decoded with the schema Dynamo's router deserialises them with.
//
// The schema is Dynamo's RouterEvent as serde derives it, transcribed from
//   ai-dynamo/dynamo lib/kv-router/src/protocols.rs, commit
//   038eab23a6b6e9b6391de6640f4f69d4c2726681 (RouterEvent, KvCacheEvent, KvCacheEventData,
//   KvCacheStoreData, KvCacheStoredBlockData, KvCacheRemoveData, StorageTier)
// and its identity types from lib/kv-router/src/identity.rs (IdentitySource: snake_case
// strings; CacheSemanticsId/RoutingScopeId: {digest: [u8; 16], source}; IndexerDomainId,
// PoolId: plain serde structs). What a JSON decoder of those types accepts:
//   worker_id: u64 (required); storage_tier: "device"|"host_pinned"|"disk"|"external"
//   (default device); residency_domain: a string (absent: decided by event kind);
//   event: {event_id: u64, data: {"stored": {parent_hash: u64|null, blocks: [{block_hash: u64,
//   tokens_hash: u64}]}} | {"removed": {block_hashes: [u64]}} | "cleared", dp_rank: u32
//   (default 0)}; state_source: Option<CacheOwnerId>, absent/null or a struct, i.e. a JSON
//   object: a JSON string fails to deserialise; unknown fields are ignored.
// And what the router then applies (RouterEvent::residency_owner): a "cache_owner" store or
// remove needs a state_source and a tier that is not device memory.
//
// Issue 27: kvpool sent state_source as a plain string, which this schema (and Dynamo) refuses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "ring_records.hpp"
#include "tools/kvpool-events/message_builder.hpp"
#include "tools/kvpool-events/router_event.hpp"

namespace kvpool::events {
namespace {

using nlohmann::json;

bool is_u64(const json& v) { return v.is_number_unsigned(); }
bool is_u32(const json& v) { return is_u64(v) && v.get<uint64_t>() <= UINT32_MAX; }

// "" when `text` decodes as Dynamo's RouterEvent and the router can apply it; else why not.
std::string dynamo_decode(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "not a JSON object";
  if (!j.contains("worker_id") || !is_u64(j["worker_id"])) return "worker_id is not a u64";
  bool gpu = true;  // StorageTier's default is Device
  if (j.contains("storage_tier")) {
    static const std::set<std::string> tiers = {"device", "host_pinned", "disk", "external"};
    if (!j["storage_tier"].is_string() || !tiers.count(j["storage_tier"].get<std::string>()))
      return "storage_tier is not a StorageTier";
    gpu = j["storage_tier"] == "device";
  }
  std::string domain;
  if (j.contains("residency_domain")) {
    if (!j["residency_domain"].is_string()) return "residency_domain is not a string";
    domain = j["residency_domain"].get<std::string>();
  }
  bool has_source = false;
  if (j.contains("state_source") && !j["state_source"].is_null()) {
    if (!j["state_source"].is_object())
      return "state_source does not deserialise as CacheOwnerId (a struct): " +
             j["state_source"].dump();
    has_source = true;
  }
  if (!j.contains("event") || !j["event"].is_object()) return "event is not a KvCacheEvent";
  const json& ev = j["event"];
  if (!ev.contains("event_id") || !is_u64(ev["event_id"])) return "event_id is not a u64";
  if (ev.contains("dp_rank") && !is_u32(ev["dp_rank"])) return "dp_rank is not a u32";
  if (!ev.contains("data")) return "event.data missing";
  const json& data = ev["data"];
  bool cleared = false;
  if (data.is_string()) {
    if (data != "cleared") return "unknown KvCacheEventData variant";
    cleared = true;
  } else if (data.is_object() && data.size() == 1 && data.contains("stored")) {
    const json& st = data["stored"];
    if (!st.contains("parent_hash") || !(st["parent_hash"].is_null() || is_u64(st["parent_hash"])))
      return "parent_hash is not Option<u64>";
    if (!st.contains("blocks") || !st["blocks"].is_array()) return "blocks is not a Vec";
    for (const json& b : st["blocks"])
      if (!b.is_object() || !b.contains("block_hash") || !is_u64(b["block_hash"]) ||
          !b.contains("tokens_hash") || !is_u64(b["tokens_hash"]))
        return "a block is not KvCacheStoredBlockData";
  } else if (data.is_object() && data.size() == 1 && data.contains("removed")) {
    const json& rm = data["removed"];
    if (!rm.contains("block_hashes") || !rm["block_hashes"].is_array())
      return "block_hashes is not a Vec";
    for (const json& h : rm["block_hashes"])
      if (!is_u64(h)) return "a removed hash is not a u64";
  } else {
    return "unknown KvCacheEventData variant";
  }
  // residency_owner(): a CacheOwner mutation needs its state source and no GPU tier.
  if (domain == "cache_owner" && !cleared && gpu) return "cache_owner event on a device tier";
  if (domain == "cache_owner" && !has_source) return "cache_owner event without state_source";
  return "";
}

// A CacheOwnerId as an operator configures it (kvpool-events --state-source): a JSON object.
json owner_id() {
  json digest = json::array();
  for (int i = 0; i < 16; ++i) digest.push_back(i);
  json pool = {{"indexer_domain",
                {{"cache_semantics", {{"digest", digest}, {"source", "explicit"}}},
                 {"routing_scope", {{"digest", digest}, {"source", "default_derived"}}}}},
               {"dc_id", 3}};
  return {{"pool_id", pool}, {"stable_dp_slot", {{"digest", digest}, {"source", "explicit"}}}};
}

struct CapturedTexts {
  std::vector<std::string> texts;
  MessageBuilder::Sink sink() {
    return [this](std::string_view s) {
      texts.emplace_back(s);
      return true;
    };
  }
};

std::vector<std::string> traffic(const RouterIdentity& id) {
  CapturedTexts cap;
  MessageBuilder b(id.worker_id, cap.sink());
  b.set_identity(id);
  // A host pool with a disk tier and a device pool: every tier's stored, removed, cleared.
  b.set_pools({{"g2", false, 16, HashScheme::kDynamo02, true},
               {"g1", true, 16, HashScheme::kDynamoRouter}});
  Records rec;
  for (uint32_t pool : {0u, 1u}) {
    for (const auto& r : rec.stored(pool, {{100, 1, std::nullopt}, {101, 2, 100}})) b.add(r);
    b.add(rec.single(shm::EventType::kRemoved, pool, 101));
    b.flush();
  }
  for (const auto& r : rec.stored(0, {{100, 1, std::nullopt}, {101, 2, 100}}, true)) b.add(r);
  b.add(rec.single(shm::EventType::kRemoved, 0, 101, true));
  b.flush();
  b.resync(std::vector<RegisteredBlock>{
      {100, 1, 0, 0, false}, {100, 1, 0, 1, false}, {100, 1, 0, 0, false, true}});
  return cap.texts;
}

TEST(DynamoSchema, EveryMessageOfTheDefaultForwarderDecodes) {
  RouterIdentity id;  // the defaults of kvpool-events: worker residency, no state source
  id.worker_id = 5;
  auto texts = traffic(id);
  ASSERT_GE(texts.size(), 6u);
  std::set<std::string> tiers;
  for (const auto& t : texts) {
    EXPECT_EQ(dynamo_decode(t), "") << t;
    EXPECT_FALSE(json::parse(t).contains("state_source")) << t;
    tiers.insert(json::parse(t)["storage_tier"].get<std::string>());
  }
  // The disk tier's events are StorageTier::Disk, spelt as serde spells it.
  EXPECT_EQ(tiers, (std::set<std::string>{"host_pinned", "device", "disk"}));
}

TEST(DynamoSchema, CacheOwnerMessagesCarryTheConfiguredCacheOwnerIdObject) {
  RouterIdentity id;
  id.worker_id = 5;
  id.cache_owner = true;
  id.state_source = owner_id();
  auto texts = traffic(id);
  size_t owner = 0;
  for (const auto& t : texts) {
    EXPECT_EQ(dynamo_decode(t), "") << t;
    json j = json::parse(t);
    if (j.value("residency_domain", "") != "cache_owner") continue;
    ++owner;
    EXPECT_NE(j["storage_tier"], "device") << t;    // host memory or its disk tier
    EXPECT_EQ(j["state_source"], owner_id()) << t;  // verbatim, an object
  }
  EXPECT_GE(owner, 6u);  // stored, removed, and the resync's cleared, of both tiers
}

TEST(DynamoSchema, AStringStateSourceIsWhatDynamoRefuses) {
  // The form kvpool sent before (issue 27), and what the parser now refuses too.
  const std::string old_form =
      R"({"worker_id":7,"storage_tier":"host_pinned","residency_domain":"cache_owner",)"
      R"("event":{"event_id":3,"dp_rank":0,"data":"cleared"},)"
      R"("state_source":"kvpool.host1.default","hash_scheme":"dynamo-0.2"})";
  EXPECT_NE(dynamo_decode(old_form), "");
  EXPECT_FALSE(parse_router_event(old_form).is_ok());
  // A cache_owner identity without a CacheOwnerId falls back to the worker's residency
  // (Dynamo refuses a cache_owner mutation without one).
  RouterIdentity id;
  id.worker_id = 5;
  id.cache_owner = true;
  for (const auto& t : traffic(id)) {
    EXPECT_EQ(dynamo_decode(t), "") << t;
    EXPECT_NE(json::parse(t).value("residency_domain", ""), "cache_owner") << t;
  }
}

}  // namespace
}  // namespace kvpool::events
