// Opaque keys beside the event ring's records (a BatchStore block's namespaced key): a
// reader gets a record's exact key bytes, or none when they were overwritten or torn while
// copied, never another record's; keys and token ids of one record travel together, and a
// token reader is not fooled by key chunks. And the daemon's path to them: a register with
// keys -> pool core -> EventPublisher -> ring.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/event_publisher.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/event_ring.hpp"
#include "unit/unit_fixtures.hpp"

namespace kvpool::shm {
namespace {

using unit::HeapRing;
using unit::Rewrite;
using unit::SideDataTally;
using unit::stored;
using unit::tally_side_data;
using unit::tokens_of;

// `n` bytes derived from `base`, every byte value used (0x00 and 0xFF included).
std::vector<std::byte> key_of(uint32_t base, size_t n) {
  std::vector<std::byte> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = static_cast<std::byte>((base * 131 + i * 37) & 0xFF);
  return k;
}

// Appends one record with `key` and (when `per` > 0) `per` tokens.
void append_one(EventRingWriter& w, uint64_t seq, const std::vector<std::byte>& key,
                const std::vector<uint32_t>& tokens = {}) {
  EventPayload p = stored(seq);
  const std::span<const std::byte> keys[1] = {key};
  const std::span<const uint32_t> toks[1] = {tokens};
  w.append(std::span<EventPayload>(&p, 1),
           tokens.empty() ? std::span<const std::span<const uint32_t>>()
                          : std::span<const std::span<const uint32_t>>(toks),
           keys);
}

TEST(EventRingKeys, AReaderGetsEachRecordsExactKeyAcrossChunksAndTheWrap) {
  HeapRing ring(256);  // 128 chunks of 104 key bytes
  EventRingReader reader = ring.reader();
  // Around the chunk boundary, a vLLM key (32-byte hash + 4-byte group), the largest key.
  const size_t sizes[] = {1, 36, 103, 104, 105, 208, 500, kEventMaxKeyBytes};
  std::vector<std::byte> got;
  std::vector<uint32_t> no_tokens{1};
  uint32_t base = 1;
  for (int round = 0; round < 5; ++round) {
    for (size_t n : sizes) {
      append_one(ring.writer, base, key_of(base, n));
      EventRecord rec{};
      ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
      ASSERT_TRUE(rec.has_key());
      EXPECT_FALSE(rec.has_tokens());
      ASSERT_TRUE(reader.read_key(rec, &got)) << "bytes " << n << " round " << round;
      EXPECT_EQ(got, key_of(base, n));
      EXPECT_FALSE(reader.read_tokens(rec, &no_tokens));  // a key is not token ids
      EXPECT_TRUE(no_tokens.empty());
      ++base;
    }
  }
  EXPECT_EQ(ring.writer.keys_left_out(), 0u);
}

TEST(EventRingKeys, TokensAndKeyOfOneRecordBothComeThroughExactly) {
  HeapRing ring(64);  // 32 chunks
  EventRingReader reader = ring.reader();
  std::vector<std::byte> key;
  std::vector<uint32_t> tokens;
  for (uint32_t i = 1; i <= 40; ++i) {  // wraps the area several times
    append_one(ring.writer, i, key_of(i, 36 + i), tokens_of(i, 16 + i));
    EventRecord rec{};
    ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
    ASSERT_TRUE(rec.has_key() && rec.has_tokens());
    ASSERT_TRUE(reader.read_tokens(rec, &tokens));
    EXPECT_EQ(tokens, tokens_of(i, 16 + i));
    ASSERT_TRUE(reader.read_key(rec, &key));
    EXPECT_EQ(key, key_of(i, 36 + i));
  }
}

TEST(EventRingKeys, OverwrittenKeysAreNoneNeverAnotherRecords) {
  HeapRing ring(16);  // 8 chunks
  EventRingReader reader = ring.reader();
  append_one(ring.writer, 100, key_of(100, 50));
  EventRecord first{};
  ASSERT_EQ(reader.next(&first), EventRingReader::Outcome::kEvent);
  for (uint32_t i = 0; i < 8; ++i) append_one(ring.writer, 200 + i, key_of(200 + i, 50));
  std::vector<std::byte> got;
  EXPECT_FALSE(reader.read_key(first, &got));  // its chunk now holds a later record's key
  EXPECT_TRUE(got.empty());
  EventRecord rec{};
  for (uint32_t i = 0; i < 8; ++i) {
    ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
    ASSERT_TRUE(reader.read_key(rec, &got));
    EXPECT_EQ(got, key_of(200 + i, 50));
  }
  // Forged slots (a corrupt record) read nothing: out of range, or another record's chunk.
  EventRecord forged = rec;
  forged.payload.token_slot = 1000;
  EXPECT_FALSE(reader.read_key(forged, &got));
  forged.payload.token_slot = (rec.payload.token_slot + 1) % 8;
  EXPECT_FALSE(reader.read_key(forged, &got));
  // A record that says it has tokens before its key, whose first chunk is a key chunk:
  // no token count there, so no key either.
  forged = rec;
  forged.payload.flags |= kEventHasTokens;
  EXPECT_FALSE(reader.read_key(forged, &got));
  std::vector<uint32_t> tokens;
  EXPECT_FALSE(reader.read_tokens(forged, &tokens));
}

TEST(EventRingKeys, AKeyChunkRewrittenWhileItIsCopiedIsRejected) {
  HeapRing ring(4);  // 2 chunks: one record's chunk is the other's next
  EventRingReader reader = ring.reader();
  append_one(ring.writer, 1, key_of(1, 60));
  EventRecord rec{};
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  Rewrite rw{&ring.writer};
  reader.set_token_copy_hook_for_testing(
      [](void* arg) {
        auto* r = static_cast<Rewrite*>(arg);
        if (r->fired) return;
        r->fired = true;
        append_one(*r->writer, 2, key_of(2, 60));
        append_one(*r->writer, 3, key_of(3, 60));
      },
      &rw);
  std::vector<std::byte> got;
  EXPECT_FALSE(reader.read_key(rec, &got));
  EXPECT_TRUE(rw.fired);
  EXPECT_TRUE(got.empty());
}

TEST(EventRingKeys, WhatDoesNotFitIsLeftOutAndCountedTheKeyBeforeTheTokens) {
  HeapRing ring(8);  // 4 chunks: at most 2 per record
  std::vector<std::byte> got;
  std::vector<uint32_t> tokens;
  // Key of 2 chunks + tokens of 1: together 3, over half. The key goes alone.
  append_one(ring.writer, 1, key_of(1, 200), tokens_of(1, 20));
  // A key over kEventMaxKeyBytes goes nowhere; its tokens still do.
  append_one(ring.writer, 2, key_of(2, kEventMaxKeyBytes + 1), tokens_of(2, 20));
  // A key of 3 chunks cannot fit half the area.
  append_one(ring.writer, 3, key_of(3, 300));
  EventRingReader reader = ring.reader();
  EventRecord rec{};
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_FALSE(rec.has_tokens());
  ASSERT_TRUE(reader.read_key(rec, &got));
  EXPECT_EQ(got, key_of(1, 200));
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_FALSE(rec.has_key());
  ASSERT_TRUE(reader.read_tokens(rec, &tokens));
  EXPECT_EQ(tokens, tokens_of(2, 20));
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_FALSE(rec.has_key());
  EXPECT_FALSE(reader.read_key(rec, &got));
  EXPECT_EQ(ring.writer.keys_left_out(), 2u);
  EXPECT_EQ(ring.writer.tokens_left_out(), 1u);
}

// A writer thread against a reader that falls behind now and then: every key the reader
// gets is exactly the one written for that record; some must come through, or the test
// proved nothing.
TEST(EventRingKeys, AConcurrentReaderGetsExactKeysOrNoneNeverOthers) {
  HeapRing ring(64);  // 32 chunks, lapped often
  EventRingReader reader = ring.reader();
  constexpr uint64_t kRecords = 100'000;
  auto bytes_of = [](uint64_t id) { return static_cast<size_t>(1 + id % 300); };  // 1..3 chunks
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t n = 0; n < kRecords; ++n) {
      const uint64_t id = ring.writer.next_id();
      append_one(ring.writer, id, key_of(static_cast<uint32_t>(id), bytes_of(id)));
    }
    done.store(true, std::memory_order_release);
  });
  const SideDataTally t = tally_side_data<std::vector<std::byte>>(
      reader, done,
      [&](const EventRecord& r, std::vector<std::byte>* got) { return reader.read_key(r, got); },
      [&](uint64_t id) { return key_of(static_cast<uint32_t>(id), bytes_of(id)); });
  writer.join();
  EXPECT_EQ(t.wrong, 0u);
  EXPECT_GT(t.exact, 0u);
}

TEST(EventRingKeys, ARegisterWithKeysReachesTheRingThroughTheDaemonsPublisher) {
  HeapRing ring(64);
  daemon::EventPublisher publisher(std::vector<EventRingWriter>{ring.writer});
  pool::PoolCoreConfig cfg{4, 2, 0};
  auto bytes = pool::PoolCore::arena_bytes(cfg);
  ASSERT_TRUE(bytes.is_ok());
  char* mem = static_cast<char*>(std::aligned_alloc(64, (*bytes + 63) / 64 * 64));
  std::unique_ptr<char, decltype(&std::free)> guard(mem, &std::free);
  auto core = pool::PoolCore::create(mem, *bytes, cfg, 0, "g");
  ASSERT_TRUE(core.is_ok());
  core->set_event_sink(&publisher);

  std::vector<pool::BlockRef> blocks(3), out(3);
  ASSERT_TRUE(core->allocate(0, 3, blocks.data()).is_ok());
  // Block 1 deduplicates onto block 0's hash (no Stored, its key goes nowhere); block 2
  // carries no key (length 0).
  std::vector<pool::RegisterItem> items = {
      {blocks[0], 11, 11, 0, 0, 0}, {blocks[1], 11, 11, 0, 0, 0}, {blocks[2], 12, 12, 0, 0, 0}};
  const std::string keys = "first-keysecond";
  const std::vector<uint64_t> ends = {9, 15, 15};
  pool::RegisterExtras with{{}, 0, std::as_bytes(std::span(keys)), ends};
  ASSERT_TRUE(core->register_blocks(0, items, out.data(), with).is_ok());

  EventRingReader reader = ring.reader();
  EventRecord rec{};
  std::vector<std::byte> got;
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_EQ(rec.payload.sequence_hash, 11u);
  ASSERT_TRUE(reader.read_key(rec, &got));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()), "first-key");
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_EQ(rec.payload.sequence_hash, 12u);
  EXPECT_FALSE(rec.has_key());
  EXPECT_EQ(reader.next(&rec), EventRingReader::Outcome::kEmpty);
}

}  // namespace
}  // namespace kvpool::shm
