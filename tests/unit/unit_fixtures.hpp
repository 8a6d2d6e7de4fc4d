// Small fixtures more than one unit test needs. The unit tests compile as unity files in CI
// (KVPOOL_UNITY), so a helper two test files share lives here, written once, instead of in
// both files' anonymous namespaces.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/core/hash.hpp"
#include "kvpool/shm/event_ring.hpp"

namespace kvpool::unit {

// The salt of the hashing tests' sequences (any fixed value: the tests compare schemes).
inline constexpr Salt kSalt = 1337;

// 64-byte aligned heap memory for an event ring of `capacity` slots.
struct HeapRing {
  explicit HeapRing(uint32_t capacity) : bytes(shm::event_ring_bytes(capacity)) {
    mem = static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    auto w = shm::EventRingWriter::create(mem, bytes, capacity);
    EXPECT_TRUE(w.is_ok()) << w.status().to_string();
    writer = w.value();
  }
  ~HeapRing() { std::free(mem); }
  HeapRing(const HeapRing&) = delete;
  HeapRing& operator=(const HeapRing&) = delete;
  shm::EventRingReader reader() const {
    auto r = shm::EventRingReader::attach(mem, bytes);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.value();
  }
  size_t bytes;
  char* mem;
  shm::EventRingWriter writer;
};

// A Stored record of `seq` (the event ring's token and key tests).
inline shm::EventPayload stored(uint64_t seq) {
  shm::EventPayload p{};
  p.type = static_cast<uint8_t>(shm::EventType::kStored);
  p.sequence_hash = seq;
  return p;
}

// `n` token ids derived from `base`, all 32 bits used.
inline std::vector<uint32_t> tokens_of(uint32_t base, uint32_t n) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = base * 7919u + i * 0x9E3779B9u;
  return t;
}

// What a reader racing a writer got as each record's side data (its token ids or its key):
// exactly what was written for that record, nothing (its chunks were lapped first), or
// anything else, which is the bug these tests look for.
struct SideDataTally {
  uint64_t exact = 0, none = 0, wrong = 0;
};

// Reads `reader` until the writer is `done` and everything published was read, yielding
// now and then to fall behind. `read(rec, &got)` fetches a record's side data (false: none);
// `expected(event_id)` is what was written for it.
template <class Got, class Read, class Expected>
SideDataTally tally_side_data(shm::EventRingReader& reader, const std::atomic<bool>& done,
                              Read read, Expected expected) {
  SideDataTally t;
  Got got;
  shm::EventRecord rec{};
  while (true) {
    const auto o = reader.next(&rec);
    if (o == shm::EventRingReader::Outcome::kEmpty) {
      if (done.load(std::memory_order_acquire) && reader.position() >= reader.published()) break;
      continue;
    }
    if (o != shm::EventRingReader::Outcome::kEvent) continue;
    if (rec.event_id % 7 == 0) std::this_thread::yield();  // fall behind now and then
    if (!read(rec, &got)) {
      ++t.none;
      EXPECT_TRUE(got.empty());
    } else if (got == expected(rec.event_id)) {
      ++t.exact;
    } else {
      ++t.wrong;
    }
  }
  std::printf("exact %llu, none %llu\n", static_cast<unsigned long long>(t.exact),
              static_cast<unsigned long long>(t.none));
  return t;
}

// State of a copy hook that rewrites a chunk while a reader copies it, once.
struct Rewrite {
  shm::EventRingWriter* writer;
  bool fired = false;
};

// A POSIX shm name unique to this test process (ctest runs tests, and other build folders,
// in parallel): "<prefix>.<pid>.<what>".
inline std::string shm_test_name(const std::string& prefix, const char* what) {
  return prefix + "." + std::to_string(::getpid()) + "." + what;
}

inline bool shm_exists(const std::string& name) {
  int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace kvpool::unit
