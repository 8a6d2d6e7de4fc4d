// A single-producer single-consumer ring of variable-length records in shared memory
// (after Aeron's ring buffers), for peers that do not trust each other: every position and
// length read from shared memory is validated before it is used, so a hostile or broken
// peer can at worst garble its own records, never make us read or write outside the ring.
//
// Layout, at an offset in a segment (no pointers stored; both sides may map it anywhere):
//
//   RingHeader   5 cache lines: tail | head | consumer_bell | producer_bell | capacity
//   data         `capacity` bytes, a power of two >= 4096
//
// tail and head are byte counters that only grow (position = counter & (capacity - 1)).
// Each record starts at an 8-byte-aligned position with a RecordHeader, and never wraps:
// when it does not fit before the end, the producer first fills the rest with a padding
// record, which the consumer skips. A record (header + payload) is at most capacity / 2.
//
// Ordering: the producer writes a record, then stores tail with release; the consumer
// loads tail with acquire, reads the record, then stores head with release; the producer
// loads head with acquire before reusing the space.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kvpool/core/status.hpp"
#include "kvpool/shm/futex.hpp"

namespace kvpool::shm {

inline constexpr uint32_t kPaddingType = 0xFFFFFFFF;
inline constexpr size_t kRingMinCapacity = 4096;
// Keeps every record length (at most capacity / 2) well inside a uint32_t.
inline constexpr size_t kRingMaxCapacity = size_t{1} << 31;
inline constexpr size_t kRecordAlignment = 8;

struct RecordHeader {
  uint32_t length;  // header + payload in bytes, not rounded up to the alignment
  uint32_t type;    // caller-defined; kPaddingType is reserved
};
static_assert(std::is_standard_layout_v<RecordHeader>);
static_assert(std::is_trivially_copyable_v<RecordHeader>);
static_assert(sizeof(RecordHeader) == 8 && offsetof(RecordHeader, length) == 0 &&
              offsetof(RecordHeader, type) == 4);
static_assert(sizeof(RecordHeader) == kRecordAlignment);

// Each counter and doorbell on its own cache line: the producer's and the consumer's
// stores never share a line.
struct RingHeader {
  alignas(64) std::atomic<uint64_t> tail;  // bytes published; written by the producer only
  // The producer's CPU tag (shm::cpu_tag) at its last publish, on the line it writes
  // anyway; 0 from producers before it. A hint: kvpoold reads a client's to learn whether
  // the caller it just answered was last seen on kvpoold's own core (then it is waiting
  // for that core, preempted by our wake-up, and lingering there would only delay it).
  std::atomic<uint32_t> producer_cpu;
  alignas(64) std::atomic<uint64_t> head;  // bytes consumed; written by the consumer only
  alignas(64) Doorbell consumer_bell;      // the consumer sleeps on it waiting for records
  alignas(64) Doorbell producer_bell;      // the producer sleeps on it waiting for space
  // Written once by init_ring before the ring is shared; for tools and sanity checks only.
  // The views use the capacity their owner passes in, never this copy.
  alignas(64) uint64_t capacity;
};
static_assert(std::is_standard_layout_v<RingHeader>);
static_assert(offsetof(RingHeader, tail) == 0);
static_assert(offsetof(RingHeader, producer_cpu) == 8);
static_assert(offsetof(RingHeader, head) == 64);
static_assert(offsetof(RingHeader, consumer_bell) == 128);
static_assert(offsetof(RingHeader, producer_bell) == 192);
static_assert(offsetof(RingHeader, capacity) == 256);
static_assert(sizeof(RingHeader) == 320);
static_assert(alignof(RingHeader) == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);

// Bytes a ring of `capacity` data bytes occupies (header + data).
constexpr size_t ring_bytes(size_t capacity) { return sizeof(RingHeader) + capacity; }

// Largest payload one record can carry in a ring of `capacity` bytes.
constexpr uint32_t max_ring_payload(size_t capacity) {
  return static_cast<uint32_t>(capacity / 2 - sizeof(RecordHeader));
}

// kInvalidArgument unless capacity is a power of two in [4096, 2^31].
Status check_ring_capacity(size_t capacity);

// Constructs an empty ring at `memory` (64-byte aligned, at least ring_bytes(capacity)
// bytes). Only while no producer or consumer uses it: at creation, or to reset the rings
// of a client that has been reclaimed.
Result<RingHeader*> init_ring(void* memory, size_t bytes, size_t capacity);

// The producer's view. Its own position is kept locally and never re-read from shared
// memory; the consumer's head is read and validated.
class RingProducer {
 public:
  // `capacity` is the producer's trusted copy (from its own configuration), not the one in
  // the header. A bad capacity, or a header that disagrees with it, makes every call fail.
  RingProducer(RingHeader* header, size_t capacity);
  RingProducer(RingProducer&&) = default;
  RingProducer& operator=(RingProducer&&) = default;
  RingProducer(const RingProducer&) = delete;
  RingProducer& operator=(const RingProducer&) = delete;

  // Reserves a record and returns where to write its `payload_len` bytes; nullptr when
  // the ring is full right now. Errors: kInvalidArgument for payload_len > max_payload()
  // or type == kPaddingType; kProtocolError once the consumer's head is found corrupt.
  // Several claims may precede one publish(); nothing is visible to the consumer before.
  Result<void*> try_claim(uint32_t type, uint32_t payload_len);

  // Makes every claimed record visible (and notes our CPU tag in producer_cpu), then wakes
  // the consumer if it sleeps. Returns the CPU tag of the consumer it woke (shm::ring), 0
  // when none was asleep.
  uint32_t publish();
  // Takes back every record claimed since the last publish(): the consumer never sees them
  // (kvpoold: an answer that waits for the disk tier instead of going out now).
  void cancel_claims() { claimed_ = published_; }

  // Waits until a record of `payload_len` bytes can be claimed (or the ring is found
  // corrupt: try_claim then reports it). See shm::wait() for the poll/timeout contract.
  WaitResult wait_for_space(uint32_t payload_len, PollPolicy policy,
                            std::chrono::nanoseconds timeout);

  // Whether the consumer has taken every published record: the waiter's `started` check
  // (shm::wait). Reads only shared counters, so any thread may ask while another produces.
  bool consumer_caught_up() const {
    return header_ != nullptr && header_->head.load(std::memory_order_acquire) >=
                                     header_->tail.load(std::memory_order_relaxed);
  }

  // Whether the consumer says it sleeps on its doorbell (kvpoold: whether a client waiting
  // for its answer holds a core; shm/cpu_share.hpp). A hint, written by the consumer.
  bool consumer_asleep() const {
    return header_ != nullptr &&
           header_->consumer_bell.sleeping.load(std::memory_order_relaxed) != 0;
  }

  size_t capacity() const { return capacity_; }
  uint32_t max_payload() const { return max_ring_payload(capacity_); }
  // Ok, or the first error that made the view unusable (sticky).
  const Status& status() const { return error_; }

 private:
  bool refresh_head();
  bool has_space(uint64_t bytes) const { return capacity_ - (claimed_ - head_) >= bytes; }
  uint64_t bytes_needed(uint32_t payload_len) const;

  RingHeader* header_;
  std::byte* data_;
  uint64_t capacity_ = 0;
  uint64_t claimed_ = 0;    // end of the last claimed record (local only)
  uint64_t published_ = 0;  // last value stored to tail
  uint64_t head_ = 0;       // last validated value of the consumer's head
  Status error_;
};

// One record as seen by the consumer: valid until consume(). The payload lives in memory
// the producer can still write, so copy out each field you use once, then validate the
// copy; never read a field twice and expect the same value.
struct RecordView {
  uint32_t type = 0;
  uint32_t payload_len = 0;
  const std::byte* payload = nullptr;  // nullptr: the ring was empty
  bool empty() const { return payload == nullptr; }
};

// The consumer's view. Its own position is kept locally and never re-read from shared
// memory; the producer's tail and every record header are read once and validated.
class RingConsumer {
 public:
  // `capacity` is the consumer's trusted copy, as for RingProducer.
  RingConsumer(RingHeader* header, size_t capacity);
  RingConsumer(RingConsumer&&) = default;
  RingConsumer& operator=(RingConsumer&&) = default;
  RingConsumer(const RingConsumer&) = delete;
  RingConsumer& operator=(const RingConsumer&) = delete;

  // The next record (the same one again until consume()), an empty view when nothing is
  // published, or kProtocolError when the producer broke the ring's rules: tail more than
  // capacity ahead of head or behind it, tail not 8-aligned, a length shorter than its
  // header, longer than the published bytes or than capacity / 2, a record crossing the
  // end, or a malformed padding record. Errors are sticky: a corrupt ring stays refused.
  // Padding records are skipped here and never shown.
  Result<RecordView> poll();

  // Releases the record returned by poll() to the producer (head store, release), then
  // wakes the producer if it waits for space. Call it once the payload has been copied.
  void consume();

  // Waits until poll() has something to say (a record, or an error to report). `started`
  // says whether the producer has begun on what we wait for (see shm::wait).
  template <class Started>
  WaitResult wait_for_data(PollPolicy policy, Started started, std::chrono::nanoseconds timeout) {
    if (!error_ || pending_ != 0) return WaitResult::kReady;
    return wait(
        header_->consumer_bell,
        [&] { return header_->tail.load(std::memory_order_acquire) != head_; }, started, policy,
        timeout);
  }
  WaitResult wait_for_data(PollPolicy policy, std::chrono::nanoseconds timeout) {
    return wait_for_data(
        policy, [] { return true; }, timeout);
  }

  // The producer's CPU tag at its last publish (RingHeader::producer_cpu): a hint, 0 when
  // unknown.
  uint32_t producer_cpu() const {
    return header_ != nullptr ? header_->producer_cpu.load(std::memory_order_relaxed) : 0;
  }

  size_t capacity() const { return capacity_; }
  uint64_t padding_skipped() const { return padding_skipped_; }
  const Status& status() const { return error_; }

 private:
  Status fail(std::string message);
  void store_head();

  RingHeader* header_;
  const std::byte* data_;
  uint64_t capacity_ = 0;
  uint64_t head_ = 0;     // our position; only we write head
  uint64_t pending_ = 0;  // aligned size of the record poll() returned; 0 if none
  RecordView current_;
  uint64_t padding_skipped_ = 0;
  Status error_;
};

}  // namespace kvpool::shm
