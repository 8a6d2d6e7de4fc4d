// The control segment's event ring: one writer, read-only readers, lap and torn-read
// detection (single process, threads, and a forked writer against a read-only reader), and
// the daemon's EventPublisher turning pool-core calls into ring records.
#include "kvpool/shm/event_ring.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "daemon/event_publisher.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/segment.hpp"
#include "unit/unit_fixtures.hpp"

namespace kvpool::shm {
namespace {

using unit::HeapRing;

// A record whose every field is derived from `tag`, so a torn copy (fields from two
// different records) shows.
EventPayload tagged(uint64_t tag) {
  EventPayload p{};
  p.type = static_cast<uint8_t>(EventType::kRemoved);
  p.sequence_hash = tag * 0x9E3779B97F4A7C15ull;
  p.block_hash = ~tag;
  p.parent_hash = tag ^ 0x5555555555555555ull;
  p.time_ns = tag + 7;
  p.priority = static_cast<uint32_t>(tag);
  p.pool = static_cast<uint16_t>(tag & 0xF);
  return p;
}

bool consistent(const EventRecord& r) {
  const uint64_t tag = r.payload.block_hash ^ ~uint64_t{0};
  const EventPayload& p = r.payload;
  return p.sequence_hash == tag * 0x9E3779B97F4A7C15ull &&
         p.parent_hash == (tag ^ 0x5555555555555555ull) && p.time_ns == tag + 7 &&
         p.priority == static_cast<uint32_t>(tag) && p.pool == (tag & 0xF) &&
         p.batch_id <= r.event_id && r.event_id < p.batch_id + p.batch_size;
}

TEST(EventRing, CapacityMustBeAPowerOfTwo) {
  EXPECT_TRUE(check_event_ring_capacity(2).is_ok());
  EXPECT_TRUE(check_event_ring_capacity(65536).is_ok());
  EXPECT_FALSE(check_event_ring_capacity(0).is_ok());
  EXPECT_FALSE(check_event_ring_capacity(1).is_ok());
  EXPECT_FALSE(check_event_ring_capacity(100).is_ok());
  EXPECT_FALSE(check_event_ring_capacity(uint64_t{kEventRingMaxCapacity} * 2).is_ok());
  // Header, slots, and the token area: one 128-byte chunk per two slots (two at least).
  EXPECT_EQ(event_ring_bytes(8), 128u + 8 * 64 + 4 * 128);
  EXPECT_EQ(event_token_chunks(2), 2u);
}

TEST(EventRing, AttachRejectsWhatIsNotARing) {
  std::vector<uint64_t> zeros(64, 0);
  auto r = EventRingReader::attach(zeros.data(), zeros.size() * 8);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kVersionMismatch);
  HeapRing ring(8);
  EXPECT_FALSE(EventRingReader::attach(ring.mem, ring.bytes - 1).is_ok());  // slots cut off
  EXPECT_FALSE(EventRingReader::attach(ring.mem, 16).is_ok());
  alignas(64) char small[256];
  EXPECT_FALSE(EventRingWriter::create(small, sizeof(small), 8).is_ok());  // too small
  EXPECT_FALSE(EventRingWriter::create(small + 8, 200, 2).is_ok());        // misaligned
}

TEST(EventRing, RecordsComeBackInOrderWithIdsAndBatchBoundaries) {
  HeapRing ring(16);
  EventRingReader reader = ring.reader();
  EventRecord rec{};
  EXPECT_EQ(reader.next(&rec), EventRingReader::Outcome::kEmpty);
  EXPECT_EQ(reader.published(), 1u);

  std::vector<EventPayload> batch(3);
  for (int i = 0; i < 3; ++i) {
    batch[i].type = static_cast<uint8_t>(EventType::kStored);
    batch[i].sequence_hash = 100 + i;
    batch[i].block_hash = 200 + i;
    batch[i].parent_hash = i == 0 ? 0 : 99 + i;
    batch[i].flags = i == 0 ? 0 : kEventHasParent;
    batch[i].priority = 5;
    batch[i].pool = 1;
  }
  EXPECT_EQ(ring.writer.append(batch), 1u);
  EventPayload removed{};
  removed.type = static_cast<uint8_t>(EventType::kRemoved);
  removed.sequence_hash = 101;
  EXPECT_EQ(ring.writer.append(removed), 4u);
  EXPECT_EQ(ring.writer.append(std::span<EventPayload>()), 5u);  // empty: nothing appended
  EXPECT_EQ(reader.published(), 5u);

  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
    EXPECT_EQ(rec.event_id, i + 1);
    EXPECT_EQ(rec.type(), EventType::kStored);
    EXPECT_EQ(rec.payload.sequence_hash, 100 + i);
    EXPECT_EQ(rec.payload.block_hash, 200 + i);
    EXPECT_EQ(rec.has_parent(), i != 0);
    if (i != 0) {
      EXPECT_EQ(rec.payload.parent_hash, 99 + i);
    }
    EXPECT_EQ(rec.payload.priority, 5u);
    EXPECT_EQ(rec.payload.pool, 1u);
    EXPECT_EQ(rec.payload.batch_id, 1u);
    EXPECT_EQ(rec.payload.batch_size, 3u);
    EXPECT_EQ(rec.batch_first(), i == 0);
    EXPECT_EQ(rec.batch_last(), i == 2);
  }
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_EQ(rec.event_id, 4u);
  EXPECT_EQ(rec.type(), EventType::kRemoved);
  EXPECT_EQ(rec.payload.sequence_hash, 101u);
  EXPECT_TRUE(rec.batch_first() && rec.batch_last());
  EXPECT_EQ(rec.payload.batch_id, 4u);
  EXPECT_EQ(rec.payload.batch_size, 1u);
  EXPECT_EQ(reader.next(&rec), EventRingReader::Outcome::kEmpty);
  EXPECT_EQ(reader.position(), 5u);
}

TEST(EventRing, SeekToEndSkipsHistoryAndSeekRereads) {
  HeapRing ring(8);
  for (uint64_t i = 0; i < 5; ++i) ring.writer.append(tagged(i));
  EventRingReader reader = ring.reader();
  reader.seek_to_end();
  EventRecord rec{};
  EXPECT_EQ(reader.next(&rec), EventRingReader::Outcome::kEmpty);
  ring.writer.append(tagged(42));
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_EQ(rec.event_id, 6u);
  EXPECT_TRUE(consistent(rec));
  reader.seek(2);
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_EQ(rec.event_id, 2u);
  EXPECT_EQ(rec.payload.block_hash, ~uint64_t{1});
}

TEST(EventRing, AReaderAFullLapBehindLearnsHowManyItLost) {
  HeapRing ring(8);
  EventRingReader reader = ring.reader();
  for (uint64_t i = 1; i <= 20; ++i) ring.writer.append(tagged(i));
  EventRecord rec{};
  // Ids 1..12 were overwritten; the ring still holds 13..20.
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kLapped);
  EXPECT_EQ(reader.lost(), 12u);
  EXPECT_EQ(reader.position(), 13u);
  for (uint64_t id = 13; id <= 20; ++id) {
    ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
    EXPECT_EQ(rec.event_id, id);
    EXPECT_EQ(rec.payload.priority, id);
    EXPECT_TRUE(consistent(rec));
  }
  EXPECT_EQ(reader.next(&rec), EventRingReader::Outcome::kEmpty);

  // Exactly one lap behind (8 unread in 8 slots) is not lapped; one more record is.
  for (uint64_t i = 21; i <= 28; ++i) ring.writer.append(tagged(i));
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_EQ(rec.event_id, 21u);
  for (uint64_t i = 29; i <= 30; ++i) ring.writer.append(tagged(i));
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kLapped);
  EXPECT_EQ(reader.lost(), 1u);  // id 22 is gone (slot now holds 30)
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_EQ(rec.event_id, 23u);
}

TEST(EventRing, ABatchLargerThanTheRingLapsItsReader) {
  HeapRing ring(4);
  EventRingReader reader = ring.reader();
  std::vector<EventPayload> batch;
  for (uint64_t i = 1; i <= 10; ++i) batch.push_back(tagged(i));
  ring.writer.append(batch);
  EventRecord rec{};
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kLapped);
  EXPECT_EQ(reader.lost(), 6u);
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_EQ(rec.event_id, 7u);
  EXPECT_EQ(rec.payload.batch_id, 1u);
  EXPECT_EQ(rec.payload.batch_size, 10u);
}

struct Overwrite {
  EventRingWriter* writer;
  int records;
  bool fired = false;
};

TEST(EventRing, ASlotOverwrittenWhileItIsCopiedIsRejectedNotReturnedTorn) {
  HeapRing ring(4);
  for (uint64_t i = 1; i <= 4; ++i) ring.writer.append(tagged(i));
  EventRingReader reader = ring.reader();
  // The writer appends id 5 into id 1's slot between the reader's copy and its re-check.
  Overwrite ow{&ring.writer, 1};
  reader.set_after_copy_hook_for_testing(
      [](void* arg) {
        auto* o = static_cast<Overwrite*>(arg);
        if (o->fired) return;
        o->fired = true;
        for (int i = 0; i < o->records; ++i) o->writer->append(tagged(1000 + i));
      },
      &ow);
  EventRecord rec{};
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kLapped);
  EXPECT_TRUE(ow.fired);
  EXPECT_EQ(reader.lost(), 1u);
  for (uint64_t id = 2; id <= 5; ++id) {
    ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
    EXPECT_EQ(rec.event_id, id);
    EXPECT_TRUE(consistent(rec));
  }
  EXPECT_EQ(rec.payload.priority, 1000u);  // id 5 is the overwriting record
}

TEST(EventRing, ASlotUnderOverwriteIsNotReadAsTheOldRecord) {
  HeapRing ring(4);
  for (uint64_t i = 1; i <= 4; ++i) ring.writer.append(tagged(i));
  EventRingReader reader = ring.reader();
  // A writer stopped half-way through id 5 (odd sequence word in id 1's slot).
  auto* slots = reinterpret_cast<EventSlot*>(ring.mem + sizeof(EventRingHeader));
  slots[1].seq.store(2 * 5 + 1, std::memory_order_release);
  EventRecord rec{};
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kLapped);
  EXPECT_EQ(reader.lost(), 1u);
  ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
  EXPECT_EQ(rec.event_id, 2u);
}

// Conservation under real concurrency: every appended record is either returned intact or
// counted as lost, never returned torn, never twice.
void stress(uint32_t capacity, uint64_t total) {
  HeapRing ring(capacity);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    std::mt19937 rng(1);
    std::vector<EventPayload> batch;
    uint64_t tag = 1;
    while (tag <= total) {
      batch.clear();
      const uint64_t n = std::min<uint64_t>(1 + rng() % 7, total - tag + 1);
      for (uint64_t i = 0; i < n; ++i) batch.push_back(tagged(tag++));
      ring.writer.append(batch);
    }
    done.store(true, std::memory_order_release);
  });
  EventRingReader reader = ring.reader();
  uint64_t got = 0, lost = 0, laps = 0, last_id = 0, torn = 0;
  EventRecord rec{};
  for (;;) {
    const bool finished = done.load(std::memory_order_acquire);
    auto o = reader.next(&rec);
    if (o == EventRingReader::Outcome::kEvent) {
      ++got;
      torn += !consistent(rec) || rec.payload.priority != static_cast<uint32_t>(rec.event_id);
      EXPECT_GT(rec.event_id, last_id);
      last_id = rec.event_id;
    } else if (o == EventRingReader::Outcome::kLapped) {
      lost += reader.lost();
      ++laps;
    } else if (finished) {
      break;
    }
  }
  writer.join();
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ(got + lost, total) << "got " << got << " lost " << lost << " laps " << laps;
  EXPECT_GT(got, 0u);
}

TEST(EventRing, ConcurrentWriterAndReaderConserveRecordsTinyRing) { stress(4, 500'000); }
TEST(EventRing, ConcurrentWriterAndReaderConserveRecordsLargeRing) { stress(1024, 500'000); }

// The real arrangement: the writer in another process, the reader on a read-only mapping
// (a write through it would fault), both through descriptors like the daemon hands out.
TEST(EventRing, ForkedWriterAndReadOnlyReader) {
  constexpr uint32_t kCapacity = 64;
  constexpr uint64_t kTotal = 200'000;
  auto seg = Segment::create_anonymous("kvpool-event-ring-test", event_ring_bytes(kCapacity));
  ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
  auto writer = EventRingWriter::create(seg->data(), seg->size(), kCapacity);
  ASSERT_TRUE(writer.is_ok());
  auto ro_fd = seg->open_readonly_fd();
  ASSERT_TRUE(ro_fd.is_ok());
  auto ro = Segment::map_fd(std::move(ro_fd.value()), false);
  ASSERT_TRUE(ro.is_ok()) << ro.status().to_string();
  ASSERT_FALSE(ro->writable());
  auto reader = EventRingReader::attach(ro->data(), ro->size());
  ASSERT_TRUE(reader.is_ok()) << reader.status().to_string();

  // Start line: the child waits for the parent's byte so the reader is ready first.
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(3);
    EventRingWriter w = writer.value();
    std::vector<EventPayload> batch;
    uint64_t tag = 1;
    std::mt19937 rng(2);
    while (tag <= kTotal) {
      batch.clear();
      const uint64_t n = std::min<uint64_t>(1 + rng() % 5, kTotal - tag + 1);
      for (uint64_t i = 0; i < n; ++i) batch.push_back(tagged(tag++));
      w.append(batch);
      if (rng() % 64 == 0) std::this_thread::yield();
    }
    ::_exit(0);
  }
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  uint64_t got = 0, lost = 0, torn = 0, last_id = 0;
  bool child_done = false;
  int wstatus = 0;
  EventRecord rec{};
  for (;;) {
    auto o = reader->next(&rec);
    if (o == EventRingReader::Outcome::kEvent) {
      ++got;
      torn += !consistent(rec) || rec.payload.priority != static_cast<uint32_t>(rec.event_id);
      if (rec.event_id <= last_id) ++torn;
      last_id = rec.event_id;
    } else if (o == EventRingReader::Outcome::kLapped) {
      lost += reader->lost();
    } else if (child_done) {
      break;
    } else if (::waitpid(child, &wstatus, WNOHANG) == child) {
      child_done = true;  // drain what it left, then stop
    }
  }
  ::close(go[0]);
  ::close(go[1]);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << wstatus;
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ(got + lost, kTotal) << "got " << got << " lost " << lost;
  EXPECT_EQ(reader->published(), kTotal + 1);
  EXPECT_GT(got, 0u);
}

// ---- the daemon's publisher over a pool core ----------------------------------------------

TEST(EventPublisher, RegisterCallsBecomeOneBatchEvictionsRemovedRecords) {
  HeapRing ring(64);
  // One ring per pool, indexed by pool: the core below is pool 3, so the ring sits at index 3
  // (every index names the same ring; only pool 3 writes).
  daemon::EventPublisher publisher(std::vector<EventRingWriter>(4, ring.writer));
  pool::PoolCoreConfig cfg{4, 2, 0};
  auto bytes = pool::PoolCore::arena_bytes(cfg);
  ASSERT_TRUE(bytes.is_ok());
  char* mem = static_cast<char*>(std::aligned_alloc(64, (*bytes + 63) / 64 * 64));
  std::unique_ptr<char, decltype(&std::free)> guard(mem, &std::free);
  auto core = pool::PoolCore::create(mem, *bytes, cfg, 3, "g2");
  ASSERT_TRUE(core.is_ok());
  core->set_event_sink(&publisher);

  std::vector<pool::BlockRef> blocks(3), out(3);
  ASSERT_TRUE(core->allocate(0, 3, blocks.data()).is_ok());
  std::vector<pool::RegisterItem> items = {
      {blocks[0], 11, 21, 0, 7, 0}, {blocks[1], 12, 22, 11, 7, 1}, {blocks[2], 13, 23, 12, 7, 1}};
  ASSERT_TRUE(core->register_blocks(0, items, out.data()).is_ok());

  EventRingReader reader = ring.reader();
  EventRecord rec{};
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(reader.next(&rec), EventRingReader::Outcome::kEvent);
    EXPECT_EQ(rec.type(), EventType::kStored);
    EXPECT_EQ(rec.payload.pool, 3u);
    EXPECT_EQ(rec.payload.sequence_hash, 11 + i);
    EXPECT_EQ(rec.payload.block_hash, 21 + i);
    EXPECT_EQ(rec.has_parent(), i > 0);
    EXPECT_EQ(rec.payload.parent_hash, i > 0 ? 10 + i : 0);
    EXPECT_EQ(rec.payload.priority, 7u);
    EXPECT_EQ(rec.payload.batch_id, 1u);
    EXPECT_EQ(rec.payload.batch_size, 3u);
    EXPECT_GT(rec.payload.time_ns, 0u);
  }
  EXPECT_EQ(reader.next(&rec), EventRingReader::Outcome::kEmpty);

  // Registering the same hashes again (deduplicated) stores nothing new.
  std::vector<pool::BlockRef> more(1), out1(1);
  ASSERT_TRUE(core->allocate(0, 1, more.data()).is_ok());
  std::vector<pool::RegisterItem> dup = {{more[0], 11, 21, 0, 7, 0}};
  ASSERT_TRUE(core->register_blocks(0, dup, out1.data()).is_ok());
  EXPECT_EQ(reader.next(&rec), EventRingReader::Outcome::kEmpty);

  // Drop every reference (tail first), then need all 4 blocks: 3 evictions, one record each.
  ASSERT_TRUE(core->release_immutable(0, out).is_ok());
  ASSERT_TRUE(core->release_immutable(0, out1).is_ok());
  std::vector<pool::BlockRef> all(4);
  ASSERT_TRUE(core->allocate(1, 4, all.data()).is_ok());
  std::vector<uint64_t> removed;
  while (reader.next(&rec) == EventRingReader::Outcome::kEvent) {
    EXPECT_EQ(rec.type(), EventType::kRemoved);
    EXPECT_EQ(rec.payload.batch_size, 1u);
    EXPECT_EQ(rec.payload.pool, 3u);
    removed.push_back(rec.payload.sequence_hash);
  }
  EXPECT_EQ(removed, (std::vector<uint64_t>{13, 12, 11}));  // tails first, as released
}

}  // namespace
}  // namespace kvpool::shm
