// kvpool-events without NATS: the router JSON (byte for byte), the ring-record -> message
// translation, the router index, and a model check that a router fed by the messages always
// knows exactly the blocks the worker's pools hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "examples/router_demo/router_index.hpp"
#include "ring_records.hpp"
#include "tools/kvpool-events/message_builder.hpp"
#include "tools/kvpool-events/router_event.hpp"

namespace kvpool::events {
namespace {

TEST(RouterEventJson, StoredRemovedClearedAreDynamosFormatByteForByte) {
  std::string s;
  std::vector<StoredHashes> blocks = {{11, 21}, {12, 22}};
  append_stored_json(s, 7, 3, std::nullopt, blocks);
  EXPECT_EQ(
      s, R"({"worker_id":7,"event":{"event_id":3,"data":{"stored":{"parent_hash":null,)"
         R"("blocks":[{"block_hash":11,"tokens_hash":21},{"block_hash":12,"tokens_hash":22}]}}}})");
  s.clear();
  append_stored_json(s, -2, 4, 18446744073709551615ull, std::span(blocks).first(1));
  EXPECT_EQ(
      s,
      R"({"worker_id":-2,"event":{"event_id":4,"data":{"stored":{"parent_hash":18446744073709551615,)"
      R"("blocks":[{"block_hash":11,"tokens_hash":21}]}}}})");
  s.clear();
  std::vector<uint64_t> removed = {5, 6, 7};
  append_removed_json(s, 7, 5, removed);
  EXPECT_EQ(
      s, R"({"worker_id":7,"event":{"event_id":5,"data":{"removed":{"block_hashes":[5,6,7]}}}})");
  s.clear();
  append_cleared_json(s, 7, 6);
  EXPECT_EQ(s, R"({"worker_id":7,"event":{"event_id":6,"data":"cleared"}})");
  EXPECT_EQ(kv_events_subject("dynamo", "backend"), "namespace.dynamo.component.backend.kv-events");
  EXPECT_EQ(kv_events_subject("dynamo", "backend", kLegacyTopic),
            "namespace.dynamo.component.backend.kv_events");
  EXPECT_EQ(resync_subject("ns", "c"), "namespace.ns.component.c.kv-events.resync");
}

TEST(RouterEventJson, ParseRoundTripsAndRejectsOtherShapes) {
  std::string s;
  std::vector<StoredHashes> blocks = {{~uint64_t{0}, 1}};
  append_stored_json(s, 9, 1, 42, blocks);
  auto e = parse_router_event(s);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->worker_id, 9);
  EXPECT_EQ(e->event_id, 1u);
  EXPECT_EQ(e->kind, RouterEvent::Kind::kStored);
  EXPECT_EQ(e->parent_hash, std::optional<uint64_t>(42));
  EXPECT_EQ(e->blocks, blocks);

  auto c = parse_router_event(R"({"worker_id":1,"event":{"event_id":2,"data":"cleared"}})");
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->kind, RouterEvent::Kind::kCleared);
  auto r = parse_router_event(
      R"({"worker_id":1,"event":{"event_id":2,"data":{"removed":{"block_hashes":[1,2]}}}})");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->block_hashes, (std::vector<uint64_t>{1, 2}));

  for (const char* bad :
       {"", "[]", "{}", R"({"worker_id":"1","event":{}})",
        R"({"worker_id":1,"event":{"event_id":-1,"data":"cleared"}})",
        R"({"worker_id":1,"event":{"event_id":1,"data":"flushed"}})",
        R"({"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[]}}}})",
        R"({"worker_id":1,"event":{"event_id":1,"data":{"removed":{"block_hashes":[-1]}}}})",
        R"({"worker_id":1,"event":{"event_id":1,"data":{"moved":{}}}})"}) {
    EXPECT_FALSE(parse_router_event(bad).is_ok()) << bad;
  }
  EXPECT_EQ(*parse_resync_request("{}"), std::nullopt);
  EXPECT_EQ(*parse_resync_request(""), std::nullopt);
  EXPECT_EQ(*parse_resync_request(R"({"worker_id":5})"), std::optional<int64_t>(5));
  EXPECT_FALSE(parse_resync_request("nope").is_ok());
}

// ---- the builder -------------------------------------------------------------------------

struct Captured {
  std::vector<RouterEvent> events;
  std::vector<std::string> raw;
  bool accept = true;
  MessageBuilder::Sink sink() {
    return [this](std::string_view json) {
      raw.emplace_back(json);
      auto e = parse_router_event(json);
      EXPECT_TRUE(e.is_ok()) << json;
      if (e) events.push_back(*e);
      return accept;
    };
  }
};

void feed(MessageBuilder& b, const std::vector<shm::EventRecord>& records) {
  for (const auto& r : records) b.add(r);
}

TEST(MessageBuilder, OneRegisterCallIsOneStoredMessage) {
  Captured cap;
  MessageBuilder b(3, cap.sink());
  Records rec;
  feed(b, rec.stored(0, {{101, 1, std::nullopt}, {102, 2, 101}, {103, 3, 102}}));
  ASSERT_EQ(cap.events.size(), 1u);  // sent at the batch's end, without waiting for flush()
  const RouterEvent& e = cap.events[0];
  EXPECT_EQ(e.worker_id, 3);
  EXPECT_EQ(e.event_id, 1u);
  EXPECT_EQ(e.kind, RouterEvent::Kind::kStored);
  EXPECT_EQ(e.parent_hash, std::nullopt);
  EXPECT_EQ(e.blocks, (std::vector<StoredHashes>{{101, 1}, {102, 2}, {103, 3}}));
  // The next call continues the sequence: its parent is the last block.
  feed(b, rec.stored(0, {{104, 4, 103}}));
  ASSERT_EQ(cap.events.size(), 2u);
  EXPECT_EQ(cap.events[1].event_id, 2u);
  EXPECT_EQ(cap.events[1].parent_hash, std::optional<uint64_t>(103));
  EXPECT_EQ(b.known_blocks(), 4u);
}

TEST(MessageBuilder, ABatchThatIsNoChainIsSplitWhereTheChainBreaks) {
  Captured cap;
  MessageBuilder b(1, cap.sink());
  Records rec;
  // 102 was deduplicated (not stored again): 101 and 103 are not parent and child.
  feed(b, rec.stored(
              0, {{101, 1, std::nullopt}, {103, 3, 102}, {104, 4, 103}, {201, 9, std::nullopt}}));
  ASSERT_EQ(cap.events.size(), 3u);
  EXPECT_EQ(cap.events[0].blocks, (std::vector<StoredHashes>{{101, 1}}));
  EXPECT_EQ(cap.events[1].parent_hash, std::optional<uint64_t>(102));
  EXPECT_EQ(cap.events[1].blocks, (std::vector<StoredHashes>{{103, 3}, {104, 4}}));
  EXPECT_EQ(cap.events[2].parent_hash, std::nullopt);
  EXPECT_EQ(cap.events[2].blocks, (std::vector<StoredHashes>{{201, 9}}));
}

TEST(MessageBuilder, LongChainsAreSplitUnderTheirLastBlock) {
  Captured cap;
  MessageBuilder b(1, cap.sink());
  Records rec;
  std::vector<std::tuple<uint64_t, uint64_t, std::optional<uint64_t>>> chain;
  const size_t n = MessageBuilder::kMaxBlocksPerMessage + 10;
  for (size_t i = 0; i < n; ++i)
    chain.emplace_back(1000 + i, i, i ? std::optional<uint64_t>(999 + i) : std::nullopt);
  feed(b, rec.stored(0, chain));
  ASSERT_EQ(cap.events.size(), 2u);
  EXPECT_EQ(cap.events[0].blocks.size(), MessageBuilder::kMaxBlocksPerMessage);
  EXPECT_EQ(cap.events[1].blocks.size(), 10u);
  EXPECT_EQ(cap.events[1].parent_hash,
            std::optional<uint64_t>(cap.events[0].blocks.back().block_hash));
}

TEST(MessageBuilder, ConsecutiveRemovalsAreOneMessage) {
  Captured cap;
  MessageBuilder b(1, cap.sink());
  Records rec;
  feed(b, rec.stored(0, {{1, 1, std::nullopt}, {2, 2, 1}, {3, 3, 2}}));
  b.add(rec.single(shm::EventType::kRemoved, 0, 3));
  b.add(rec.single(shm::EventType::kRemoved, 0, 2));
  EXPECT_EQ(cap.events.size(), 1u);                    // a run of removals waits for its end
  b.add(rec.single(shm::EventType::kRemoved, 0, 77));  // never stored: nothing to say
  feed(b, rec.stored(0, {{4, 4, std::nullopt}}));      // ends the run
  ASSERT_EQ(cap.events.size(), 3u);
  EXPECT_EQ(cap.events[1].kind, RouterEvent::Kind::kRemoved);
  EXPECT_EQ(cap.events[1].block_hashes, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(cap.events[2].kind, RouterEvent::Kind::kStored);
  b.add(rec.single(shm::EventType::kRemoved, 0, 1));
  b.flush();  // the ring ran dry
  ASSERT_EQ(cap.events.size(), 4u);
  EXPECT_EQ(cap.events[3].block_hashes, (std::vector<uint64_t>{1}));
  for (size_t i = 0; i < cap.events.size(); ++i) EXPECT_EQ(cap.events[i].event_id, i + 1);
}

TEST(MessageBuilder, SeveralPoolsAreOneWorker) {
  Captured cap;
  MessageBuilder b(1, cap.sink());
  Records rec;
  feed(b, rec.stored(0, {{1, 1, std::nullopt}}));
  feed(b, rec.stored(1, {{1, 1, std::nullopt}, {2, 2, 1}}));
  ASSERT_EQ(cap.events.size(), 2u);
  EXPECT_EQ(cap.events[1].parent_hash, std::optional<uint64_t>(1));  // 1 was known already
  EXPECT_EQ(cap.events[1].blocks, (std::vector<StoredHashes>{{2, 2}}));
  b.add(rec.single(shm::EventType::kRemoved, 0, 1));
  b.flush();
  EXPECT_EQ(cap.events.size(), 2u);  // pool 1 still holds it
  b.add(rec.single(shm::EventType::kCleared, 1));
  ASSERT_EQ(cap.events.size(), 3u);
  EXPECT_EQ(cap.events[2].kind, RouterEvent::Kind::kCleared);  // nothing left anywhere
  EXPECT_EQ(b.known_blocks(), 0u);

  feed(b, rec.stored(0, {{5, 5, std::nullopt}}));
  feed(b, rec.stored(1, {{6, 6, std::nullopt}}));
  b.add(rec.single(shm::EventType::kCleared, 1));  // pool 0 keeps 5: only 6 goes
  ASSERT_EQ(cap.events.size(), 6u);
  EXPECT_EQ(cap.events[5].kind, RouterEvent::Kind::kRemoved);
  EXPECT_EQ(cap.events[5].block_hashes, (std::vector<uint64_t>{6}));
}

TEST(MessageBuilder, ResyncSendsClearedThenTheRegistryAsChains) {
  Captured cap;
  MessageBuilder b(4, cap.sink());
  // A tree: 1 -> 2 -> 3, 2 -> 4 (a branch), an orphan 9 whose parent 8 was evicted, a root 7
  // held by two pools.
  std::vector<RegisteredBlock> reg = {
      {3, 30, 2, 0, true}, {1, 10, 0, 0, false}, {4, 40, 2, 0, true}, {2, 20, 1, 0, true},
      {9, 90, 8, 0, true}, {7, 70, 0, 0, false}, {7, 70, 0, 1, false}};
  b.resync(reg);
  ASSERT_GE(cap.events.size(), 2u);
  EXPECT_EQ(cap.events[0].kind, RouterEvent::Kind::kCleared);
  std::map<uint64_t, std::optional<uint64_t>> parent_of;  // as the messages imply
  std::multiset<uint64_t> seen;
  for (size_t i = 1; i < cap.events.size(); ++i) {
    const RouterEvent& e = cap.events[i];
    ASSERT_EQ(e.kind, RouterEvent::Kind::kStored);
    std::optional<uint64_t> parent = e.parent_hash;
    for (const auto& blk : e.blocks) {
      parent_of[blk.block_hash] = parent;
      seen.insert(blk.block_hash);
      EXPECT_EQ(blk.tokens_hash, blk.block_hash * 10);
      if (parent && *parent != 8) {
        EXPECT_TRUE(seen.count(*parent)) << "parent " << *parent << " after its child";
      }
      parent = blk.block_hash;
    }
  }
  EXPECT_EQ(seen, (std::multiset<uint64_t>{1, 2, 3, 4, 7, 9}));  // each once
  EXPECT_EQ(parent_of[1], std::nullopt);
  EXPECT_EQ(parent_of[2], std::optional<uint64_t>(1));
  EXPECT_EQ(parent_of[3], std::optional<uint64_t>(2));
  EXPECT_EQ(parent_of[4], std::optional<uint64_t>(2));
  EXPECT_EQ(parent_of[9], std::optional<uint64_t>(8));
  EXPECT_EQ(parent_of[7], std::nullopt);
  // 1 -> 2 -> 3 is one message; the branch 4 and the other roots are messages of their own.
  EXPECT_EQ(cap.events.size(), 1u + 4u);
  EXPECT_EQ(b.known_blocks(), 6u);
  EXPECT_EQ(b.stats().resyncs, 1u);
}

TEST(MessageBuilder, AFailedSendMarksItOutOfSyncUntilTheNextResync) {
  Captured cap;
  MessageBuilder b(1, cap.sink());
  Records rec;
  cap.accept = false;
  feed(b, rec.stored(0, {{1, 1, std::nullopt}}));
  EXPECT_FALSE(b.in_sync());
  cap.accept = true;
  b.resync({});
  EXPECT_TRUE(b.in_sync());
}

// Random registrations, evictions and clears in two pools, through the builder and the JSON
// into a router index: after every step the router holds exactly the union of the pools.
// A resync from the truth, at random points, must leave it equally right.
TEST(MessageBuilder, ARouterFedByItsMessagesAlwaysKnowsExactlyWhatThePoolsHold) {
  RouterIndex index;
  MessageBuilder b(12, [&](std::string_view json) {
    auto e = parse_router_event(json);
    EXPECT_TRUE(e.is_ok()) << json;
    if (e) index.apply(*e);
    return true;
  });
  Records rec;
  std::mt19937_64 rng(5);
  std::map<uint64_t, std::tuple<uint64_t, std::optional<uint64_t>>>
      pools[2];  // seq -> block, parent
  for (int step = 0; step < 3000; ++step) {
    const uint32_t p = rng() % 2;
    const int action = static_cast<int>(rng() % 20);
    if (action < 10) {
      // A register call: a chain of up to 6, continuing a random known block or a new root,
      // skipping (deduplicating) blocks the pool already has.
      std::optional<uint64_t> parent;
      if (!pools[p].empty() && rng() % 2) {
        auto it = pools[p].begin();
        std::advance(it, static_cast<long>(rng() % pools[p].size()));
        parent = it->first;
      }
      std::vector<std::tuple<uint64_t, uint64_t, std::optional<uint64_t>>> batch;
      const int n = 1 + static_cast<int>(rng() % 6);
      for (int i = 0; i < n; ++i) {
        const uint64_t seq = rng() % 400;  // small space: collisions across pools happen
        if (!pools[p].count(seq)) {
          batch.emplace_back(seq, seq + 7, parent);
          pools[p][seq] = {seq + 7, parent};
        }
        parent = seq;
      }
      if (!batch.empty()) feed(b, rec.stored(p, batch));
    } else if (action < 18) {
      const int n = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < n && !pools[p].empty(); ++i) {
        auto it = pools[p].begin();
        std::advance(it, static_cast<long>(rng() % pools[p].size()));
        b.add(rec.single(shm::EventType::kRemoved, p, it->first));
        pools[p].erase(it);
      }
    } else if (action == 18) {
      b.add(rec.single(shm::EventType::kCleared, p));
      pools[p].clear();
    } else {
      std::vector<RegisteredBlock> truth;
      for (uint32_t q = 0; q < 2; ++q)
        for (const auto& [seq, v] : pools[q])
          truth.push_back(
              {seq, std::get<0>(v), std::get<1>(v).value_or(0), q, std::get<1>(v).has_value()});
      b.resync(truth);
    }
    b.flush();
    std::set<uint64_t> want;
    for (auto& pool : pools)
      for (auto& [seq, v] : pool) want.insert(seq);
    ASSERT_EQ(index.sizes()[12], want.size()) << "step " << step;
    for (uint64_t seq : want)
      ASSERT_TRUE(index.holds(12, seq)) << "step " << step << " seq " << seq;
  }
}

RouterEvent event(int64_t worker, uint64_t id, RouterEvent::Kind kind,
                  std::vector<StoredHashes> blocks = {}, std::vector<uint64_t> removed = {}) {
  RouterEvent e;
  e.worker_id = worker;
  e.event_id = id;
  e.kind = kind;
  e.blocks = std::move(blocks);
  e.block_hashes = std::move(removed);
  return e;
}

TEST(RouterIndex, OverlapIsTheLeadingRunPerWorker) {
  RouterIndex idx;
  RouterEvent s = event(1, 1, RouterEvent::Kind::kStored, {{10, 0}, {11, 0}, {12, 0}});
  idx.apply(s);
  RouterEvent s2 = event(2, 1, RouterEvent::Kind::kStored, {{10, 0}, {12, 0}});
  idx.apply(s2);
  std::vector<uint64_t> q = {10, 11, 12, 13};
  auto o = idx.overlaps(q);
  EXPECT_EQ(o[1], 3u);
  EXPECT_EQ(o[2], 1u);  // 12 without 11 is no prefix
  RouterEvent r = event(1, 2, RouterEvent::Kind::kRemoved, {}, {11});
  idx.apply(r);
  EXPECT_EQ(idx.overlaps(q)[1], 1u);
  RouterEvent c = event(2, 2, RouterEvent::Kind::kCleared);
  idx.apply(c);
  EXPECT_EQ(idx.overlaps(q)[2], 0u);
  EXPECT_EQ(idx.sizes()[2], 0u);
  EXPECT_EQ(idx.total_blocks(), 2u);
}

// ---- today's envelope: storage tier, residency, dp_rank, state source, hash scheme ------

TEST(RouterEventJson, TodaysEnvelopeCarriesDynamosNewFields) {
  std::string s;
  EventSource src(7);
  src.dp_rank = 2;
  src.storage_tier = kTierHostPinned;
  src.residency_domain = kDomainCacheOwner;
  // Dynamo's CacheOwnerId is a struct: it travels as the object it was configured as.
  const nlohmann::ordered_json owner = {{"pool_id", {{"dc_id", 3}}}, {"slot", 4}};
  src.state_source = &owner;
  src.hash_scheme = "dynamo-0.2";
  std::vector<StoredHashes> blocks = {{11, 21}};
  append_stored_json(s, src, 3, 5, blocks);
  EXPECT_EQ(s, R"({"worker_id":7,"storage_tier":"host_pinned","residency_domain":"cache_owner",)"
               R"("event":{"event_id":3,"dp_rank":2,"data":{"stored":{"parent_hash":5,)"
               R"("blocks":[{"block_hash":11,"tokens_hash":21}]}}},)"
               R"("state_source":{"pool_id":{"dc_id":3},"slot":4},"hash_scheme":"dynamo-0.2"})");
  auto e = parse_router_event(s);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->storage_tier, "host_pinned");
  EXPECT_EQ(e->residency_domain, "cache_owner");
  EXPECT_EQ(e->state_source, R"({"pool_id":{"dc_id":3},"slot":4})");
  EXPECT_EQ(e->hash_scheme, "dynamo-0.2");
  EXPECT_EQ(e->dp_rank, std::optional<uint32_t>(2));
  s.clear();
  append_cleared_json(s, src, 4);
  EXPECT_EQ(s, R"({"worker_id":7,"storage_tier":"host_pinned","residency_domain":"cache_owner",)"
               R"("event":{"event_id":4,"dp_rank":2,"data":"cleared"},)"
               R"("state_source":{"pool_id":{"dc_id":3},"slot":4},"hash_scheme":"dynamo-0.2"})");
  // Valid JSON as a whole, whichever form.
  EXPECT_TRUE(nlohmann::json::accept(s));
}

TEST(MessageBuilder, HostPoolsSpeakAsTheCacheOwnerDevicePoolsAsTheWorker) {
  Captured cap;
  MessageBuilder b(5, cap.sink());
  RouterIdentity id;
  id.worker_id = 5;
  id.dp_rank = 1;
  id.cache_owner = true;
  id.state_source = {{"pool_id", {{"dc_id", 1}}}};
  b.set_identity(id);
  b.set_pools(
      {{"g2", false, 16, HashScheme::kDynamo02}, {"g1", true, 16, HashScheme::kDynamoRouter}});
  Records rec;
  // The same chain in the host pool, then in the device pool: one stored message per tier.
  feed(b, rec.stored(0, {{100, 1, std::nullopt}, {101, 2, 100}}));
  feed(b, rec.stored(1, {{100, 1, std::nullopt}, {101, 2, 100}}));
  ASSERT_EQ(cap.events.size(), 2u);
  EXPECT_EQ(cap.events[0].storage_tier, "host_pinned");
  EXPECT_EQ(cap.events[0].residency_domain, "cache_owner");
  EXPECT_EQ(cap.events[0].state_source, R"({"pool_id":{"dc_id":1}})");
  EXPECT_EQ(cap.events[0].hash_scheme, "dynamo-0.2");
  EXPECT_EQ(cap.events[1].storage_tier, "device");
  EXPECT_EQ(cap.events[1].residency_domain, "worker");
  EXPECT_EQ(cap.events[1].state_source, "");  // a worker's own cache has no state source
  EXPECT_EQ(cap.events[1].hash_scheme, "dynamo-router");
  EXPECT_EQ(cap.events[1].dp_rank, std::optional<uint32_t>(1));
  // The device pool drops 101: removed from the device tier only.
  b.add(rec.single(shm::EventType::kRemoved, 1, 101));
  b.flush();
  ASSERT_EQ(cap.events.size(), 3u);
  EXPECT_EQ(cap.events[2].kind, RouterEvent::Kind::kRemoved);
  EXPECT_EQ(cap.events[2].storage_tier, "device");
  EXPECT_EQ(cap.events[2].block_hashes, (std::vector<uint64_t>{101}));
  // A resync clears both residency domains, then stores each tier's chains.
  b.resync(std::vector<RegisteredBlock>{{100, 1, 0, 0, false}, {100, 1, 0, 1, false}});
  ASSERT_EQ(cap.events.size(), 7u);
  EXPECT_EQ(cap.events[3].kind, RouterEvent::Kind::kCleared);
  EXPECT_EQ(cap.events[3].residency_domain, "cache_owner");
  EXPECT_EQ(cap.events[4].kind, RouterEvent::Kind::kCleared);
  EXPECT_EQ(cap.events[4].residency_domain, "worker");
  EXPECT_EQ(cap.events[5].storage_tier, "host_pinned");
  EXPECT_EQ(cap.events[6].storage_tier, "device");
}

TEST(MessageBuilder, TheLegacyEnvelopeKeepsEveryPoolOneCache) {
  // No tier in Dynamo 0.2.1's envelope: a hash in a host and a device pool is one block to
  // that router, stored once and removed only when the last pool drops it.
  Captured cap;
  MessageBuilder b(5, cap.sink());
  b.set_pools({{"g2", false, 16, HashScheme::kDynamo02}, {"g1", true, 16, HashScheme::kDynamo02}});
  Records rec;
  feed(b, rec.stored(0, {{100, 1, std::nullopt}}));
  feed(b, rec.stored(1, {{100, 1, std::nullopt}}));
  b.add(rec.single(shm::EventType::kRemoved, 1, 100));
  b.flush();
  ASSERT_EQ(cap.events.size(), 1u);
  EXPECT_EQ(cap.events[0].kind, RouterEvent::Kind::kStored);
  b.add(rec.single(shm::EventType::kRemoved, 0, 100));
  b.flush();
  ASSERT_EQ(cap.events.size(), 2u);
  EXPECT_EQ(cap.events[1].kind, RouterEvent::Kind::kRemoved);
}

// A pool's disk tier (issue 28 item 8): its own "disk" tier to the router, beside the
// pool's host_pinned one. The same hash is stored in both; leaving one tier removes it there
// only. The disk tier speaks with its host pool's residency and hash scheme.
TEST(MessageBuilder, ADiskTierIsAStorageTierOfItsOwn) {
  Captured cap;
  MessageBuilder b(5, cap.sink());
  RouterIdentity id;
  id.worker_id = 5;
  id.cache_owner = true;
  id.state_source = {{"pool_id", {{"dc_id", 1}}}};
  b.set_identity(id);
  b.set_pools({{"g", false, 16, HashScheme::kDynamoRouter, true}});
  Records rec;
  feed(b, rec.stored(0, {{100, 1, std::nullopt}, {101, 2, 100}}));
  feed(b, rec.stored(0, {{100, 1, std::nullopt}, {101, 2, 100}}, true));  // written behind
  ASSERT_EQ(cap.events.size(), 2u);
  EXPECT_EQ(cap.events[0].storage_tier, "host_pinned");
  EXPECT_EQ(cap.events[1].kind, RouterEvent::Kind::kStored);
  EXPECT_EQ(cap.events[1].storage_tier, "disk");
  EXPECT_EQ(cap.events[1].residency_domain, "cache_owner");
  EXPECT_EQ(cap.events[1].state_source, R"({"pool_id":{"dc_id":1}})");
  EXPECT_EQ(cap.events[1].hash_scheme, "dynamo-router");
  EXPECT_EQ(cap.events[1].parent_hash, std::nullopt);
  EXPECT_EQ(cap.events[1].blocks, (std::vector<StoredHashes>{{100, 1}, {101, 2}}));
  // Host memory evicts 101: removed from host_pinned; the disk still has it.
  b.add(rec.single(shm::EventType::kRemoved, 0, 101));
  // A disk slot evicted: removed from disk; one message per tier, in order.
  b.add(rec.single(shm::EventType::kRemoved, 0, 100, true));
  b.flush();
  ASSERT_EQ(cap.events.size(), 4u);
  EXPECT_EQ(cap.events[2].kind, RouterEvent::Kind::kRemoved);
  EXPECT_EQ(cap.events[2].storage_tier, "host_pinned");
  EXPECT_EQ(cap.events[2].block_hashes, (std::vector<uint64_t>{101}));
  EXPECT_EQ(cap.events[3].kind, RouterEvent::Kind::kRemoved);
  EXPECT_EQ(cap.events[3].storage_tier, "disk");
  EXPECT_EQ(cap.events[3].block_hashes, (std::vector<uint64_t>{100}));
  EXPECT_EQ(b.known_blocks(), 2u);  // 100 in memory, 101 on disk
  // A disk removal of a hash the disk never announced (or announced twice): nothing.
  b.add(rec.single(shm::EventType::kRemoved, 0, 100, true));
  b.add(rec.single(shm::EventType::kRemoved, 0, 555, true));
  b.flush();
  EXPECT_EQ(cap.events.size(), 4u);
  // A resync clears the host tier and the disk tier, then stores each tier's chains.
  b.resync(
      std::vector<RegisteredBlock>{{100, 1, 0, 0, false, false}, {101, 2, 100, 0, true, true}});
  ASSERT_EQ(cap.events.size(), 8u);
  EXPECT_EQ(cap.events[4].kind, RouterEvent::Kind::kCleared);
  EXPECT_EQ(cap.events[4].storage_tier, "host_pinned");
  EXPECT_EQ(cap.events[5].kind, RouterEvent::Kind::kCleared);
  EXPECT_EQ(cap.events[5].storage_tier, "disk");
  EXPECT_EQ(cap.events[6].storage_tier, "host_pinned");
  EXPECT_EQ(cap.events[6].blocks, (std::vector<StoredHashes>{{100, 1}}));
  EXPECT_EQ(cap.events[7].storage_tier, "disk");
  EXPECT_EQ(cap.events[7].parent_hash, std::optional<uint64_t>(100));
  EXPECT_EQ(cap.events[7].blocks, (std::vector<StoredHashes>{{101, 2}}));
}

// Dynamo 0.2.1's envelope has no tier: a disk event would read as memory there. None go out.
TEST(MessageBuilder, TheLegacyEnvelopeSendsNoDiskEvents) {
  Captured cap;
  MessageBuilder b(5, cap.sink());
  b.set_pools({{"g", false, 16, HashScheme::kDynamo02, true}});
  Records rec;
  feed(b, rec.stored(0, {{100, 1, std::nullopt}}));
  feed(b, rec.stored(0, {{100, 1, std::nullopt}}, true));
  b.add(rec.single(shm::EventType::kRemoved, 0, 100, true));
  b.flush();
  ASSERT_EQ(cap.events.size(), 1u);
  EXPECT_EQ(cap.events[0].storage_tier, "");
  EXPECT_EQ(cap.events[0].kind, RouterEvent::Kind::kStored);
  b.resync(std::vector<RegisteredBlock>{{7, 70, 0, 0, false, true}});
  ASSERT_EQ(cap.events.size(), 2u);  // "cleared" alone: the disk block is not announced
  EXPECT_EQ(cap.events[1].kind, RouterEvent::Kind::kCleared);
}

// The router demo keeps tiers apart: a worker holds a block while any tier does.
TEST(RouterIndex, ABlockIsHeldWhileAnyTierHoldsIt) {
  RouterIndex idx;
  Captured cap;
  MessageBuilder b(3, cap.sink());
  RouterIdentity id;
  id.worker_id = 3;
  b.set_identity(id);
  b.set_pools({{"g", false, 16, HashScheme::kDynamo02, true}});
  Records rec;
  feed(b, rec.stored(0, {{1, 1, std::nullopt}, {2, 2, 1}}));
  feed(b, rec.stored(0, {{1, 1, std::nullopt}, {2, 2, 1}}, true));
  b.add(rec.single(shm::EventType::kRemoved, 0, 1));
  b.add(rec.single(shm::EventType::kRemoved, 0, 2));
  b.flush();
  for (const auto& e : cap.events) idx.apply(e);
  const std::vector<uint64_t> chain = {1, 2};
  EXPECT_EQ(idx.overlaps(chain).at(3), 2u);  // gone from memory, still on disk
  EXPECT_FALSE(idx.holds_in(3, 1, "host_pinned"));
  EXPECT_TRUE(idx.holds_in(3, 1, "disk"));
  EXPECT_EQ(idx.total_blocks(), 2u);
  cap.events.clear();
  b.add(rec.single(shm::EventType::kRemoved, 0, 1, true));
  b.flush();
  for (const auto& e : cap.events) idx.apply(e);
  EXPECT_EQ(idx.overlaps(chain).at(3), 0u);
  EXPECT_TRUE(idx.holds(3, 2));
  EXPECT_EQ(idx.total_blocks(), 1u);
}

TEST(MessageBuilder, WithoutAnIdentityTheEnvelopeIsDynamo021s) {
  Captured cap;
  MessageBuilder b(5, cap.sink());
  b.set_pools({{"g2", false, 16, HashScheme::kDynamo02}});
  Records rec;
  feed(b, rec.stored(0, {{100, 1, std::nullopt}}));
  ASSERT_EQ(cap.raw.size(), 1u);
  EXPECT_EQ(cap.raw[0], R"({"worker_id":5,"event":{"event_id":1,"data":{"stored":{)"
                        R"("parent_hash":null,"blocks":[{"block_hash":100,"tokens_hash":1}]}}}})");
}

}  // namespace
}  // namespace kvpool::events
