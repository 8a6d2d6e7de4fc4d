// The vLLM format without ZMQ: KVEventBatch encoding (decoded back with msgpack-c, field by
// field, in both of msgspec's forms) and the ring-record -> batch translation.
#include <gtest/gtest.h>

#define MSGPACK_NO_BOOST
#include <msgpack.hpp>
#include <string>
#include <vector>

#include "ring_records.hpp"
#include "tools/kvpool-events/vllm_builder.hpp"
#include "tools/kvpool-events/vllm_event.hpp"

namespace kvpool::events {
namespace {

// A decoded KVEventBatch, whichever form it came in.
struct Decoded {
  double ts = 0;
  int64_t dp_rank = -1;
  std::string hash_scheme;
  struct Event {
    std::string type;
    std::vector<int64_t> block_hashes;  // 0 where the hash is bytes
    std::vector<std::string> keys;      // the bytes of each hash sent as bin, else ""
    bool parent_nil = true;
    int64_t parent = 0;
    std::string parent_key;
    size_t token_ids = 99;
    uint32_t block_size = 0;
    std::string medium;
    size_t fields = 0;  // besides the tag
  };
  std::vector<Event> events;
};

std::string as_str(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::STR);
  return o.as<std::string>();
}

Decoded decode(const std::string& payload, VllmEncoding enc) {
  msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& root = oh.get();
  Decoded d;
  auto event_of = [&](const msgpack::object& e) {
    Decoded::Event ev;
    auto set = [&](const std::string& name, const msgpack::object& v) {
      if (name == "type") {
        ev.type = as_str(v);
        return;
      }
      ++ev.fields;
      // A hash is an int, or bytes (vLLM's ExternalBlockHash = bytes | int).
      auto hash = [](const msgpack::object& h, int64_t* value, std::string* key) {
        if (h.type == msgpack::type::BIN) {
          key->assign(h.via.bin.ptr, h.via.bin.size);
          *value = 0;
        } else {
          *value = h.as<int64_t>();
        }
      };
      if (name == "block_hashes") {
        for (uint32_t i = 0; i < v.via.array.size; ++i) {
          ev.block_hashes.emplace_back();
          ev.keys.emplace_back();
          hash(v.via.array.ptr[i], &ev.block_hashes.back(), &ev.keys.back());
        }
      } else if (name == "parent_block_hash") {
        ev.parent_nil = v.is_nil();
        if (!v.is_nil()) hash(v, &ev.parent, &ev.parent_key);
      } else if (name == "token_ids") {
        ev.token_ids = v.via.array.size;
      } else if (name == "block_size") {
        ev.block_size = v.as<uint32_t>();
      } else if (name == "medium") {
        ev.medium = v.is_nil() ? "" : as_str(v);
      } else if (name == "lora_id" || name == "lora_name") {
        EXPECT_TRUE(v.is_nil()) << name;
      } else {
        ADD_FAILURE() << "unexpected field " << name;
      }
    };
    if (enc == VllmEncoding::kMap) {
      EXPECT_EQ(e.type, msgpack::type::MAP);
      // msgspec writes the tag first.
      EXPECT_EQ(as_str(e.via.map.ptr[0].key), "type");
      for (uint32_t i = 0; i < e.via.map.size; ++i)
        set(as_str(e.via.map.ptr[i].key), e.via.map.ptr[i].val);
    } else {
      EXPECT_EQ(e.type, msgpack::type::ARRAY);
      ev.type = as_str(e.via.array.ptr[0]);
      static const char* stored[] = {"block_hashes", "parent_block_hash", "token_ids",
                                     "block_size",   "lora_id",           "medium",
                                     "lora_name"};
      static const char* removed[] = {"block_hashes", "medium"};
      for (uint32_t i = 1; i < e.via.array.size; ++i)
        set(ev.type == "BlockStored" ? stored[i - 1] : removed[i - 1], e.via.array.ptr[i]);
    }
    d.events.push_back(ev);
  };
  if (enc == VllmEncoding::kMap) {
    EXPECT_EQ(root.type, msgpack::type::MAP);
    for (uint32_t i = 0; i < root.via.map.size; ++i) {
      const std::string k = as_str(root.via.map.ptr[i].key);
      const msgpack::object& v = root.via.map.ptr[i].val;
      if (k == "ts") d.ts = v.as<double>();
      if (k == "data_parallel_rank") d.dp_rank = v.as<int64_t>();
      if (k == "hash_scheme") d.hash_scheme = as_str(v);
      if (k == "events")
        for (uint32_t j = 0; j < v.via.array.size; ++j) event_of(v.via.array.ptr[j]);
    }
  } else {
    EXPECT_EQ(root.type, msgpack::type::ARRAY);
    EXPECT_EQ(root.via.array.size, 4u);
    d.ts = root.via.array.ptr[0].as<double>();
    const msgpack::object& evs = root.via.array.ptr[1];
    for (uint32_t j = 0; j < evs.via.array.size; ++j) event_of(evs.via.array.ptr[j]);
    d.dp_rank = root.via.array.ptr[2].as<int64_t>();
    d.hash_scheme = as_str(root.via.array.ptr[3]);
  }
  return d;
}

TEST(VllmEvent, BothFormsCarryEveryFieldOfVllmsStructs) {
  std::vector<VllmEvent> evs(3);
  evs[0].kind = VllmEvent::Kind::kStored;
  evs[0].block_hashes = {signed_hash(~uint64_t{0}), 5};
  evs[0].parent_block_hash = signed_hash(0x8000000000000000ull);
  evs[0].block_size = 16;
  evs[0].medium = kMediumCpu;
  evs[1].kind = VllmEvent::Kind::kRemoved;
  evs[1].block_hashes = {7};
  evs[1].medium = kMediumGpu;
  evs[2].kind = VllmEvent::Kind::kCleared;
  for (VllmEncoding enc : {VllmEncoding::kMap, VllmEncoding::kArray}) {
    std::string payload;
    encode_vllm_batch(payload, enc, 1234.5, evs, 3, HashScheme::kDynamoRouter);
    Decoded d = decode(payload, enc);
    EXPECT_EQ(d.ts, 1234.5);
    EXPECT_EQ(d.dp_rank, 3);
    EXPECT_EQ(d.hash_scheme, "dynamo-router");
    ASSERT_EQ(d.events.size(), 3u);
    EXPECT_EQ(d.events[0].type, "BlockStored");
    EXPECT_EQ(d.events[0].fields, 7u);
    // Hashes as signed 64-bit integers: the top bit set reads negative.
    EXPECT_EQ(d.events[0].block_hashes, (std::vector<int64_t>{-1, 5}));
    EXPECT_FALSE(d.events[0].parent_nil);
    EXPECT_EQ(d.events[0].parent, INT64_MIN);
    EXPECT_EQ(d.events[0].token_ids, 0u);
    EXPECT_EQ(d.events[0].block_size, 16u);
    EXPECT_EQ(d.events[0].medium, "CPU");
    EXPECT_EQ(d.events[1].type, "BlockRemoved");
    EXPECT_EQ(d.events[1].fields, 2u);
    EXPECT_EQ(d.events[1].medium, "GPU");
    EXPECT_EQ(d.events[2].type, "AllBlocksCleared");
    EXPECT_EQ(d.events[2].fields, 0u);
  }
}

struct Batches {
  std::vector<Decoded> got;
  bool accept = true;
  VllmBatchBuilder::Sink sink() {
    return [this](std::string_view p) {
      got.push_back(decode(std::string(p), VllmEncoding::kMap));
      return accept;
    };
  }
};

std::vector<PoolMeta> two_pools() {
  return {{"g2", false, 16, HashScheme::kDynamo02}, {"g1", true, 32, HashScheme::kDynamo02}};
}

TEST(VllmBatchBuilder, RegisterCallsBecomeChainedBlockStoredPerMedium) {
  Batches out;
  VllmBatchBuilder b(VllmEncoding::kMap, 0, out.sink());
  b.set_pools(two_pools());
  Records rec;
  for (auto& r : rec.stored(0, {{10, 1, std::nullopt}, {11, 2, 10}, {12, 3, 11}})) b.add(r);
  // A call whose blocks are two chains (a deduplicated block in between): split.
  for (auto& r : rec.stored(1, {{20, 4, 5}, {21, 5, 20}, {30, 6, 29}})) b.add(r);
  b.add(rec.single(shm::EventType::kRemoved, 0, 10));
  b.add(rec.single(shm::EventType::kRemoved, 0, 11));
  b.add(rec.single(shm::EventType::kRemoved, 1, 20));
  EXPECT_TRUE(out.got.empty());  // nothing until the ring runs dry
  b.flush();
  ASSERT_EQ(out.got.size(), 1u);
  const auto& e = out.got[0].events;
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[0].block_hashes, (std::vector<int64_t>{10, 11, 12}));
  EXPECT_TRUE(e[0].parent_nil);
  EXPECT_EQ(e[0].medium, "CPU");
  EXPECT_EQ(e[0].block_size, 16u);
  EXPECT_EQ(e[1].block_hashes, (std::vector<int64_t>{20, 21}));
  EXPECT_EQ(e[1].parent, 5);
  EXPECT_EQ(e[1].medium, "GPU");
  EXPECT_EQ(e[1].block_size, 32u);
  EXPECT_EQ(e[2].block_hashes, (std::vector<int64_t>{30}));
  EXPECT_EQ(e[2].parent, 29);
  EXPECT_EQ(e[3].type, "BlockRemoved");
  EXPECT_EQ(e[3].block_hashes, (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(e[3].medium, "CPU");
  EXPECT_EQ(e[4].block_hashes, (std::vector<int64_t>{20}));
  EXPECT_EQ(e[4].medium, "GPU");
  EXPECT_EQ(b.stats().stored_blocks, 6u);
  EXPECT_TRUE(b.in_sync());
}

// A BlockStored carries the token ids of all its blocks or of none (consumers split them by
// block_size): a chain whose blocks differ in that is split, each part keeping its parent.
TEST(VllmBatchBuilder, TokenIdsGoWithTheirBlocksAndSplitAChainWhereSomeLackThem) {
  Batches out;
  VllmBatchBuilder b(VllmEncoding::kMap, 0, out.sink());
  b.set_pools(two_pools());  // pool 0: 16 tokens per block
  Records rec;
  const std::vector<uint32_t> page(16, 7), short_page(15, 7);
  auto r = rec.stored(0, {{10, 1, std::nullopt}, {11, 2, 10}, {12, 3, 11}, {13, 4, 12}});
  b.add(r[0], page);
  b.add(r[1], page);
  b.add(r[2]);              // lost (overwritten) or never sent: none
  b.add(r[3], short_page);  // not a whole page: treated as none
  b.flush();
  ASSERT_EQ(out.got.size(), 1u);
  const auto& e = out.got[0].events;
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].block_hashes, (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(e[0].token_ids, 32u);
  EXPECT_EQ(e[1].block_hashes, (std::vector<int64_t>{12, 13}));
  EXPECT_EQ(e[1].parent, 11);
  EXPECT_EQ(e[1].token_ids, 0u);
  EXPECT_EQ(b.stats().blocks_with_tokens, 2u);
}

TEST(VllmBatchBuilder, APoolClearAsksForAResyncWhichClearsThenStoresTheRegistry) {
  Batches out;
  VllmBatchBuilder b(VllmEncoding::kMap, 2, out.sink());
  b.set_pools(two_pools());
  Records rec;
  b.add(rec.single(shm::EventType::kCleared, 1));
  EXPECT_FALSE(b.in_sync());
  b.resync(std::vector<RegisteredBlock>{
      {11, 2, 10, 0, true}, {10, 1, 0, 0, false}, {12, 3, 11, 0, true}, {40, 9, 0, 1, false}});
  EXPECT_TRUE(b.in_sync());
  ASSERT_EQ(out.got.size(), 1u);
  EXPECT_EQ(out.got[0].dp_rank, 2);
  const auto& e = out.got[0].events;
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].type, "AllBlocksCleared");
  EXPECT_EQ(e[1].block_hashes, (std::vector<int64_t>{10, 11, 12}));  // parents first
  EXPECT_EQ(e[1].medium, "CPU");
  EXPECT_EQ(e[2].block_hashes, (std::vector<int64_t>{40}));
  EXPECT_EQ(e[2].medium, "GPU");
}

// A pool's disk tier (issue 28 item 8): medium "DISK", its own BlockStored / BlockRemoved
// beside the pool's "CPU" ones; a host event never continues a disk event or the other way.
TEST(VllmBatchBuilder, DiskTierEventsAreMediumDisk) {
  Batches out;
  VllmBatchBuilder b(VllmEncoding::kMap, 0, out.sink());
  b.set_pools({{"g", false, 16, HashScheme::kDynamo02, true}});
  Records rec;
  for (auto& r : rec.stored(0, {{10, 1, std::nullopt}, {11, 2, 10}})) b.add(r);
  for (auto& r : rec.stored(0, {{10, 1, std::nullopt}, {11, 2, 10}}, true)) b.add(r);
  b.add(rec.single(shm::EventType::kRemoved, 0, 10));
  b.add(rec.single(shm::EventType::kRemoved, 0, 11, true));
  b.add(rec.single(shm::EventType::kRemoved, 0, 10, true));
  b.flush();
  ASSERT_EQ(out.got.size(), 1u);
  const auto& e = out.got[0].events;
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].type, "BlockStored");
  EXPECT_EQ(e[0].medium, "CPU");
  EXPECT_EQ(e[1].type, "BlockStored");
  EXPECT_EQ(e[1].medium, "DISK");
  EXPECT_EQ(e[1].block_hashes, (std::vector<int64_t>{10, 11}));
  EXPECT_TRUE(e[1].parent_nil);
  EXPECT_EQ(e[1].block_size, 16u);
  EXPECT_EQ(e[2].type, "BlockRemoved");
  EXPECT_EQ(e[2].medium, "CPU");
  EXPECT_EQ(e[2].block_hashes, (std::vector<int64_t>{10}));
  EXPECT_EQ(e[3].type, "BlockRemoved");
  EXPECT_EQ(e[3].medium, "DISK");
  EXPECT_EQ(e[3].block_hashes, (std::vector<int64_t>{11, 10}));
  // A resync's disk blocks are BlockStored of medium DISK, after the pool's memory.
  b.resync(std::vector<RegisteredBlock>{{20, 1, 0, 0, false, true}, {30, 1, 0, 0, false, false}});
  ASSERT_EQ(out.got.size(), 2u);
  const auto& r = out.got[1].events;
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].type, "AllBlocksCleared");
  EXPECT_EQ(r[1].medium, "CPU");
  EXPECT_EQ(r[1].block_hashes, (std::vector<int64_t>{30}));
  EXPECT_EQ(r[2].medium, "DISK");
  EXPECT_EQ(r[2].block_hashes, (std::vector<int64_t>{20}));
}

TEST(VllmBatchBuilder, ABatchNamesOneHashSchemeAndAFailedSendIsAGap) {
  Batches out;
  VllmBatchBuilder b(VllmEncoding::kMap, 0, out.sink());
  b.set_pools({{"a", false, 4, HashScheme::kDynamo02}, {"b", false, 4, HashScheme::kDynamoRouter}});
  Records rec;
  for (auto& r : rec.stored(0, {{1, 1, std::nullopt}})) b.add(r);
  for (auto& r : rec.stored(1, {{2, 2, std::nullopt}})) b.add(r);
  b.flush();
  ASSERT_EQ(out.got.size(), 2u);
  EXPECT_EQ(out.got[0].hash_scheme, "dynamo-0.2");
  EXPECT_EQ(out.got[1].hash_scheme, "dynamo-router");
  out.accept = false;
  for (auto& r : rec.stored(0, {{3, 3, std::nullopt}})) b.add(r);
  b.flush();
  EXPECT_FALSE(b.in_sync());
}

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s)); }

// --vllm-block-hashes key: a keyed block goes by its key (bin) in its BlockStored, in its
// BlockRemoved (remembered from the Stored) and as a child's parent; a block without a key
// goes by its index hash, and so does every block of the disk tier.
TEST(VllmBatchBuilder, KeyedBlocksGoByTheirKeyInStoredRemovedAndAsParent) {
  Batches out;
  VllmBatchBuilder b(VllmEncoding::kMap, 0, out.sink(), VllmBlockHashes::kKey);
  b.set_pools(two_pools());
  Records rec;
  const std::string ten("k\0ten\xff", 7), thirteen = "k-thirteen";
  b.add(rec.stored(0, {{10, 10, std::nullopt}})[0], {}, bytes_of(ten));
  b.add(rec.stored(0, {{12, 12, std::nullopt}})[0]);  // no key: its index hash
  b.add(rec.stored(0, {{13, 13, 10}})[0], {}, bytes_of(thirteen));
  b.add(rec.stored(0, {{14, 14, std::nullopt}}, /*disk=*/true)[0], {}, bytes_of("disk"));
  b.add(rec.single(shm::EventType::kRemoved, 0, 10));
  b.add(rec.single(shm::EventType::kRemoved, 0, 12));
  b.add(rec.single(shm::EventType::kRemoved, 0, 10));  // again (cannot happen): by hash now
  b.flush();
  ASSERT_EQ(out.got.size(), 1u);
  const auto& e = out.got[0].events;
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[0].keys, (std::vector<std::string>{ten}));
  EXPECT_TRUE(e[0].parent_nil);
  EXPECT_EQ(e[1].keys, (std::vector<std::string>{""}));
  EXPECT_EQ(e[1].block_hashes, (std::vector<int64_t>{12}));
  EXPECT_EQ(e[2].keys, (std::vector<std::string>{thirteen}));
  EXPECT_EQ(e[2].parent_key, ten);
  EXPECT_EQ(e[3].medium, "DISK");
  EXPECT_EQ(e[3].block_hashes, (std::vector<int64_t>{14}));
  EXPECT_EQ(e[3].keys, (std::vector<std::string>{""}));
  EXPECT_EQ(e[4].type, "BlockRemoved");
  EXPECT_EQ(e[4].keys, (std::vector<std::string>{ten, "", ""}));
  EXPECT_EQ(e[4].block_hashes, (std::vector<int64_t>{0, 12, 10}));
  EXPECT_EQ(b.stats().blocks_with_keys, 2u);
  EXPECT_EQ(b.stats().removed_with_keys, 1u);
}

// After a resync the consumer knows the registry by index hashes (the registry keeps no
// keys): a keyed block stored before it is removed by its index hash, as it was last stored.
TEST(VllmBatchBuilder, AfterAResyncKeyedBlocksAreRemovedByTheirIndexHash) {
  Batches out;
  VllmBatchBuilder b(VllmEncoding::kMap, 0, out.sink(), VllmBlockHashes::kKey);
  b.set_pools(two_pools());
  Records rec;
  b.add(rec.stored(0, {{10, 10, std::nullopt}})[0], {}, bytes_of("key-10"));
  b.add(rec.stored(0, {{11, 11, std::nullopt}})[0], {}, bytes_of("key-11"));
  b.flush();
  RegisteredBlock reg{};
  reg.pool = 0;
  reg.sequence_hash = 11;
  b.resync(std::span(&reg, 1));
  b.add(rec.single(shm::EventType::kRemoved, 0, 11));
  b.flush();
  ASSERT_EQ(out.got.size(), 3u);
  const auto& r = out.got[1].events;  // the resync
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].type, "AllBlocksCleared");
  EXPECT_EQ(r[1].block_hashes, (std::vector<int64_t>{11}));
  EXPECT_EQ(r[1].keys, (std::vector<std::string>{""}));
  const auto& rm = out.got[2].events;
  ASSERT_EQ(rm.size(), 1u);
  EXPECT_EQ(rm[0].block_hashes, (std::vector<int64_t>{11}));
  EXPECT_EQ(rm[0].keys, (std::vector<std::string>{""}));
}

// The keys kept for Removed events are bounded: over the cap a keyed block is stored (and
// so removed) by its index hash, never by a key the builder would not remember.
TEST(VllmBatchBuilder, KeysOverTheMemoryCapGoByIndexHashBothWays) {
  Batches out;
  VllmBatchBuilder b(VllmEncoding::kMap, 0, out.sink(), VllmBlockHashes::kKey);
  b.set_pools(two_pools());
  b.set_key_memory(10);
  Records rec;
  b.add(rec.stored(0, {{1, 1, std::nullopt}})[0], {}, bytes_of("sixbyt"));
  b.add(rec.stored(0, {{2, 2, std::nullopt}})[0], {}, bytes_of("five!"));  // 11 > 10
  b.add(rec.single(shm::EventType::kRemoved, 0, 1));                       // frees 6
  b.add(rec.stored(0, {{3, 3, std::nullopt}})[0], {}, bytes_of("five?"));  // fits again
  b.add(rec.single(shm::EventType::kRemoved, 0, 2));
  b.add(rec.single(shm::EventType::kRemoved, 0, 3));
  b.flush();
  ASSERT_EQ(out.got.size(), 1u);
  const auto& e = out.got[0].events;
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[0].keys, (std::vector<std::string>{"sixbyt"}));
  EXPECT_EQ(e[1].keys, (std::vector<std::string>{""}));
  EXPECT_EQ(e[1].block_hashes, (std::vector<int64_t>{2}));
  EXPECT_EQ(e[2].keys, (std::vector<std::string>{"sixbyt"}));
  EXPECT_EQ(e[3].keys, (std::vector<std::string>{"five?"}));
  EXPECT_EQ(e[4].keys, (std::vector<std::string>{"", "five?"}));
  EXPECT_EQ(e[4].block_hashes, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(b.stats().keys_not_kept, 1u);
}

// The default (--vllm-block-hashes index): keyed blocks go by their index hash, the form
// Dynamo's ZMQ relay decodes (i64 | u64 only).
TEST(VllmBatchBuilder, ByDefaultKeyedBlocksGoByTheirIndexHash) {
  Batches out;
  VllmBatchBuilder b(VllmEncoding::kMap, 0, out.sink());
  b.set_pools(two_pools());
  Records rec;
  b.add(rec.stored(0, {{10, 10, std::nullopt}})[0], {}, bytes_of("key-10"));
  b.add(rec.single(shm::EventType::kRemoved, 0, 10));
  b.flush();
  ASSERT_EQ(out.got.size(), 1u);
  const auto& e = out.got[0].events;
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].block_hashes, (std::vector<int64_t>{10}));
  EXPECT_EQ(e[0].keys, (std::vector<std::string>{""}));
  EXPECT_EQ(e[1].block_hashes, (std::vector<int64_t>{10}));
  EXPECT_EQ(e[1].keys, (std::vector<std::string>{""}));
}

}  // namespace
}  // namespace kvpool::events
