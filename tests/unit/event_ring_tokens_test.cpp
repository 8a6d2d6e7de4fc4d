// Token ids beside the event ring's records (RegisterOptions::send_tokens): a reader gets a
// record's exact tokens, or none when they were overwritten or torn while copied, never
// another record's; records without tokens leave the token area alone. And the daemon's path
// to them: pool core -> EventPublisher -> ring.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
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

// Appends one batch of `n` stored records, record i with tokens_of(base + i, per).
uint64_t append_with_tokens(EventRingWriter& w, uint32_t base, uint32_t n, uint32_t per) {
  std::vector<EventPayload> records;
  std::vector<std::vector<uint32_t>> tokens;
  for (uint32_t i = 0; i < n; ++i) {
    records.push_back(stored(base + i));
    tokens.push_back(tokens_of(base + i, per));
  }
  std::vector<std::span<const uint32_t>> spans(tokens.begin(), tokens.end());
  return w.append(records, spans);
}

TEST(EventRingTokens, AReaderGetsEachRecordsExactTokensAcrossChunksAndTheWrap) {
  HeapRing ring(64);  // 32 chunks of 26 tokens
  EXPECT_EQ(ring.writer.token_chunks(), 32u);
  EventRingReader reader = ring.reader();
  EXPECT_EQ(reader.token_chunks(), 32u);
  // Sizes around the chunk boundary, an odd count, and enough rounds to wrap the area.
  const uint32_t sizes[] = {1, 16, 25, 26, 27, 52, 53, 64, 101};
  uint32_t base = 1;
  std::vector<uint32_t> got;
  for (int round = 0; round < 6; ++round) {
    for (uint32_t per : sizes) {
      append_with_tokens(ring.writer, base, 2, per);
      EventRecord rec{};
      for (uint32_t i = 0; i < 2; ++i) {
        ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
        ASSERT_TRUE(rec.has_tokens());
        ASSERT_TRUE(reader.read_tokens(rec, &got)) << "per " << per << " round " << round;
        EXPECT_EQ(got, tokens_of(base + i, per));
      }
      base += 2;
    }
  }
  EXPECT_EQ(ring.writer.tokens_left_out(), 0u);
}

TEST(EventRingTokens, RecordsWithoutTokensHaveNoneAndLeaveTheAreaAlone) {
  HeapRing ring(8);
  append_with_tokens(ring.writer, 1, 1, 16);
  std::vector<EventPayload> plain = {stored(5), stored(6)};
  ring.writer.append(plain);
  const std::vector<std::span<const uint32_t>> empty_spans(2);
  ring.writer.append(plain, empty_spans);  // spans given, all empty: no tokens either
  EventRingReader reader = ring.reader();
  EventRecord rec{};
  std::vector<uint32_t> got{1, 2, 3};
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_TRUE(reader.read_tokens(rec, &got));
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
    EXPECT_FALSE(rec.has_tokens());
    EXPECT_FALSE(reader.read_tokens(rec, &got));
    EXPECT_TRUE(got.empty());
  }
  // Only the first record wrote a chunk (one write: its word went 0 -> 2), no other.
  const auto* chunks = reinterpret_cast<const TokenChunk*>(ring.mem + sizeof(EventRingHeader) +
                                                           8 * sizeof(EventSlot));
  EXPECT_EQ(chunks[0].seq.load(std::memory_order_relaxed), 2u);
  for (uint32_t i = 1; i < ring.writer.token_chunks(); ++i)
    EXPECT_EQ(chunks[i].seq.load(std::memory_order_relaxed), 0u) << "chunk " << i;
}

TEST(EventRingTokens, OverwrittenTokensAreNoneNeverAnotherRecords) {
  HeapRing ring(16);  // 8 chunks: tokens of the newest 8 one-chunk records stay readable
  EventRingReader reader = ring.reader();
  append_with_tokens(ring.writer, 100, 1, 20);
  EventRecord first{};
  ASSERT_EQ(reader.next(&first), EventRingReader::Outcome::kEvent);
  // 8 more records: the first one's chunk is reused (the records themselves are still there).
  append_with_tokens(ring.writer, 200, 8, 20);
  std::vector<uint32_t> got;
  EXPECT_FALSE(reader.read_tokens(first, &got));
  EXPECT_TRUE(got.empty());
  EventRecord rec{};
  for (uint32_t i = 0; i < 8; ++i) {
    ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
    ASSERT_TRUE(reader.read_tokens(rec, &got));
    EXPECT_EQ(got, tokens_of(200 + i, 20));
  }
  // A forged slot index (a record from a corrupt ring) reads no tokens either.
  EventRecord forged = rec;
  forged.payload.token_slot = 1000;
  EXPECT_FALSE(reader.read_tokens(forged, &got));
  forged.payload.token_slot = (rec.payload.token_slot + 1) % 8;
  EXPECT_FALSE(reader.read_tokens(forged, &got));  // another record's chunk: owner differs
}

TEST(EventRingTokens, AChunkRewrittenWhileItIsCopiedIsRejected) {
  HeapRing ring(4);  // 2 chunks
  EventRingReader reader = ring.reader();
  append_with_tokens(ring.writer, 1, 1, 10);
  EventRecord rec{};
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  // Between the reader's copy of the chunk and its re-check, the writer reuses that chunk
  // (two more records of one chunk each).
  Rewrite rw{&ring.writer};
  reader.set_token_copy_hook_for_testing(
      [](void* arg) {
        auto* r = static_cast<Rewrite*>(arg);
        if (r->fired) return;
        r->fired = true;
        append_with_tokens(*r->writer, 50, 2, 10);
      },
      &rw);
  std::vector<uint32_t> got;
  EXPECT_FALSE(reader.read_tokens(rec, &got));
  EXPECT_TRUE(rw.fired);
  EXPECT_TRUE(got.empty());
}

TEST(EventRingTokens, TokensThatWouldTakeMoreThanHalfTheAreaAreLeftOutAndCounted) {
  HeapRing ring(8);  // 4 chunks: at most 2 per record (52 tokens)
  append_with_tokens(ring.writer, 1, 1, 52);
  append_with_tokens(ring.writer, 2, 1, 53);
  EventRingReader reader = ring.reader();
  EventRecord rec{};
  std::vector<uint32_t> got;
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_TRUE(reader.read_tokens(rec, &got));
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_FALSE(rec.has_tokens());
  EXPECT_EQ(ring.writer.tokens_left_out(), 1u);
}

// A writer thread against a reader that falls behind now and then: every time the reader
// gets tokens, they are exactly the ones written for that record (derived from its event
// id); when they are gone it gets none. Some must come through exactly, or the test proved
// nothing.
TEST(EventRingTokens, AConcurrentReaderGetsExactTokensOrNoneNeverOthers) {
  HeapRing ring(64);  // 32 chunks: a small area that the writer laps often
  EventRingReader reader = ring.reader();
  constexpr uint64_t kRecords = 200'000;
  auto per_of = [](uint64_t id) { return static_cast<uint32_t>(1 + id % 60); };  // 1..3 chunks
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t n = 0; n < kRecords; ++n) {
      const uint64_t id = ring.writer.next_id();
      EventPayload p = stored(id);
      const std::vector<uint32_t> t = tokens_of(static_cast<uint32_t>(id), per_of(id));
      const std::span<const uint32_t> spans[1] = {t};
      ring.writer.append(std::span<EventPayload>(&p, 1), spans);
    }
    done.store(true, std::memory_order_release);
  });
  const SideDataTally t = tally_side_data<std::vector<uint32_t>>(
      reader, done,
      [&](const EventRecord& r, std::vector<uint32_t>* got) { return reader.read_tokens(r, got); },
      [&](uint64_t id) { return tokens_of(static_cast<uint32_t>(id), per_of(id)); });
  writer.join();
  EXPECT_EQ(t.wrong, 0u);
  EXPECT_GT(t.exact, 0u);
}

TEST(EventRingTokens, ARegisterWithTokensReachesTheRingThroughTheDaemonsPublisher) {
  HeapRing ring(64);
  daemon::EventPublisher publisher(std::vector<EventRingWriter>{ring.writer});  // pool 0's ring
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
  // Block 1 deduplicates onto block 0's hash: it stores nothing, and its tokens go nowhere.
  std::vector<pool::RegisterItem> items = {
      {blocks[0], 11, 21, 0, 0, 0}, {blocks[1], 11, 21, 0, 0, 0}, {blocks[2], 12, 22, 11, 0, 1}};
  const std::vector<uint32_t> all = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(
      core->register_blocks(0, items, out.data(), pool::RegisterExtras{all, 4, {}, {}}).is_ok());

  EventRingReader reader = ring.reader();
  EventRecord rec{};
  std::vector<uint32_t> got;
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  ASSERT_TRUE(reader.read_tokens(rec, &got));
  EXPECT_EQ(got, (std::vector<uint32_t>{1, 2, 3, 4}));
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_EQ(rec.payload.sequence_hash, 12u);
  ASSERT_TRUE(reader.read_tokens(rec, &got));
  EXPECT_EQ(got, (std::vector<uint32_t>{9, 10, 11, 12}));
  EXPECT_EQ(reader.next(&rec), EventRingReader::Outcome::kEmpty);
}

}  // namespace
}  // namespace kvpool::shm
