#include "kvpool/shm/ring.hpp"

#include <bit>
#include <cstdint>
#include <new>
#include <string>

namespace kvpool::shm {
namespace {

constexpr uint64_t align_up(uint64_t n) {
  return (n + (kRecordAlignment - 1)) & ~uint64_t{kRecordAlignment - 1};
}

bool is_aligned(uint64_t n) { return (n & (kRecordAlignment - 1)) == 0; }

std::byte* data_of(RingHeader* header) {
  return reinterpret_cast<std::byte*>(header) + sizeof(RingHeader);
}

// Record headers are read and written through atomic_ref: the peer may write them
// concurrently (if it misbehaves), and each field must be read exactly once. relaxed: the
// tail/head release-acquire pair orders them.
RecordHeader load_header(const std::byte* at) {
  auto* h = reinterpret_cast<RecordHeader*>(const_cast<std::byte*>(at));
  return RecordHeader{std::atomic_ref<uint32_t>(h->length).load(std::memory_order_relaxed),
                      std::atomic_ref<uint32_t>(h->type).load(std::memory_order_relaxed)};
}

void store_header(std::byte* at, uint32_t length, uint32_t type) {
  auto* h = reinterpret_cast<RecordHeader*>(at);
  std::atomic_ref<uint32_t>(h->length).store(length, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(h->type).store(type, std::memory_order_relaxed);
}

// Written before the ring is shared and never changed after; relaxed is enough.
uint64_t header_capacity(RingHeader* header) {
  return std::atomic_ref<uint64_t>(header->capacity).load(std::memory_order_relaxed);
}

Status check_header_capacity(RingHeader* header, size_t capacity) {
  KVPOOL_RETURN_IF_ERROR(check_ring_capacity(capacity));
  if (header == nullptr) return {ErrorCode::kInvalidArgument, "ring header is null"};
  uint64_t in_shm = header_capacity(header);
  if (in_shm != capacity) {
    return {ErrorCode::kProtocolError, "ring header says capacity " + std::to_string(in_shm) +
                                           ", expected " + std::to_string(capacity)};
  }
  return {};
}

// For error messages only: the hot path builds no strings.
std::string at(uint64_t pos) { return " at position " + std::to_string(pos); }

}  // namespace

Status check_ring_capacity(size_t capacity) {
  if (!std::has_single_bit(capacity) || capacity < kRingMinCapacity ||
      capacity > kRingMaxCapacity) {
    return {ErrorCode::kInvalidArgument, "ring capacity " + std::to_string(capacity) +
                                             " must be a power of two in [4096, 2^31]"};
  }
  return {};
}

Result<RingHeader*> init_ring(void* memory, size_t bytes, size_t capacity) {
  KVPOOL_RETURN_IF_ERROR(check_ring_capacity(capacity));
  if (memory == nullptr || reinterpret_cast<uintptr_t>(memory) % alignof(RingHeader) != 0) {
    return Status(ErrorCode::kInvalidArgument, "ring memory must be 64-byte aligned");
  }
  if (bytes < ring_bytes(capacity)) {
    return Status(ErrorCode::kInvalidArgument, "ring of capacity " + std::to_string(capacity) +
                                                   " needs " +
                                                   std::to_string(ring_bytes(capacity)) +
                                                   " bytes, got " + std::to_string(bytes));
  }
  // Value-initialisation zeroes the counters and doorbells.
  auto* header = new (memory) RingHeader();
  std::atomic_ref<uint64_t>(header->capacity).store(capacity, std::memory_order_relaxed);
  // Publishing the segment to a peer (socket message, or the segment's own state word
  // with release) orders these stores before the peer's first access.
  return header;
}

// ---- producer ----

RingProducer::RingProducer(RingHeader* header, size_t capacity)
    : header_(header), data_(header ? data_of(header) : nullptr), capacity_(capacity) {
  error_ = check_header_capacity(header, capacity);
  if (!error_) return;
  // tail is ours, but it sits in memory the consumer can write: read it once, now.
  claimed_ = published_ = header_->tail.load(std::memory_order_relaxed);
  head_ = header_->head.load(std::memory_order_acquire);
  if (!is_aligned(published_) || !is_aligned(head_) || head_ > published_ ||
      published_ - head_ > capacity_) {
    error_ = Status(ErrorCode::kProtocolError, "ring positions are corrupt at attach: head " +
                                                   std::to_string(head_) + ", tail " +
                                                   std::to_string(published_));
  }
}

// Re-reads the consumer's head. false (and the view becomes unusable) when the consumer
// broke the rules: it may only move forward, in whole records, up to what was published.
bool RingProducer::refresh_head() {
  if (!error_) return false;
  uint64_t h = header_->head.load(std::memory_order_acquire);
  if (h < head_ || h > published_ || !is_aligned(h)) {
    error_ = Status(ErrorCode::kProtocolError,
                    "ring consumer head moved to " + std::to_string(h) + " (was " +
                        std::to_string(head_) + ", published " + std::to_string(published_) + ")");
    return false;
  }
  head_ = h;
  return true;
}

// Worst case for a record of payload_len: padding up to the end plus the record.
uint64_t RingProducer::bytes_needed(uint32_t payload_len) const {
  uint64_t aligned = align_up(uint64_t{payload_len} + sizeof(RecordHeader));
  uint64_t to_end = capacity_ - (claimed_ & (capacity_ - 1));
  return aligned <= to_end ? aligned : to_end + aligned;
}

Result<void*> RingProducer::try_claim(uint32_t type, uint32_t payload_len) {
  if (!error_) return error_;
  if (type == kPaddingType) {
    return Status(ErrorCode::kInvalidArgument, "record type 0xFFFFFFFF is reserved for padding");
  }
  if (payload_len > max_payload()) {
    return Status(ErrorCode::kInvalidArgument, "record payload of " + std::to_string(payload_len) +
                                                   " bytes exceeds the ring's maximum of " +
                                                   std::to_string(max_payload()));
  }
  const uint64_t needed = bytes_needed(payload_len);
  if (!has_space(needed)) {
    if (!refresh_head()) return error_;
    if (!has_space(needed)) return static_cast<void*>(nullptr);
  }
  const uint64_t length = uint64_t{payload_len} + sizeof(RecordHeader);
  uint64_t pos = claimed_ & (capacity_ - 1);
  const uint64_t to_end = capacity_ - pos;
  if (align_up(length) > to_end) {
    store_header(data_ + pos, static_cast<uint32_t>(to_end), kPaddingType);
    claimed_ += to_end;
    pos = 0;
  }
  store_header(data_ + pos, static_cast<uint32_t>(length), type);
  claimed_ += align_up(length);
  return static_cast<void*>(data_ + pos + sizeof(RecordHeader));
}

uint32_t RingProducer::publish() {
  if (claimed_ == published_) return 0;
  published_ = claimed_;
  // relaxed, before the tail's release store: a consumer that has acquired this tail
  // reads this tag or a later one. A hint, on the tail's cache line, which this publish
  // writes anyway (cpu_tag: no system call where glibc reads it from rseq).
  header_->producer_cpu.store(cpu_tag(), std::memory_order_relaxed);
  // release: the records (headers and payloads) are visible before the new tail.
  header_->tail.store(published_, std::memory_order_release);
  return ring(header_->consumer_bell);
}

WaitResult RingProducer::wait_for_space(uint32_t payload_len, PollPolicy policy,
                                        std::chrono::nanoseconds timeout) {
  if (!error_ || payload_len > max_payload()) return WaitResult::kReady;
  const uint64_t needed = bytes_needed(payload_len);
  return wait(
      header_->producer_bell,
      [&] { return has_space(needed) || !refresh_head() || has_space(needed); }, policy, timeout);
}

// ---- consumer ----

RingConsumer::RingConsumer(RingHeader* header, size_t capacity)
    : header_(header), data_(header ? data_of(header) : nullptr), capacity_(capacity) {
  error_ = check_header_capacity(header, capacity);
  if (!error_) return;
  // head is ours, but it sits in memory the producer can write: read it once, now.
  head_ = header_->head.load(std::memory_order_relaxed);
  if (!is_aligned(head_)) {
    error_ = Status(ErrorCode::kProtocolError,
                    "ring head " + std::to_string(head_) + " is not 8-byte aligned at attach");
  }
}

Status RingConsumer::fail(std::string message) {
  error_ = Status(ErrorCode::kProtocolError, "ring corrupt: " + std::move(message));
  pending_ = 0;
  current_ = RecordView{};
  return error_;
}

void RingConsumer::store_head() {
  // release: our reads of the records are done before the producer may overwrite them.
  header_->head.store(head_, std::memory_order_release);
  ring(header_->producer_bell);
}

Result<RecordView> RingConsumer::poll() {
  if (!error_) return error_;
  if (pending_ != 0) return current_;
  // Twice at most: one padding record, then the record at position 0. A padding record at
  // position 0 is an error, so a producer cannot keep us here.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const uint64_t tail = header_->tail.load(std::memory_order_acquire);
    const uint64_t avail = tail - head_;  // wraps to a huge value if tail went backwards
    if (avail > capacity_) {
      return fail("tail " + std::to_string(tail) + " is not within capacity " +
                  std::to_string(capacity_) + " ahead of head " + std::to_string(head_));
    }
    if (!is_aligned(tail)) return fail("tail " + std::to_string(tail) + " is not 8-byte aligned");
    if (avail == 0) return RecordView{};

    const uint64_t pos = head_ & (capacity_ - 1);
    const uint64_t to_end = capacity_ - pos;          // >= 8: pos and capacity are multiples of 8
    const RecordHeader h = load_header(data_ + pos);  // copied once; only the copy is used
    if (h.type == kPaddingType) {
      if (pos == 0 || h.length != to_end) {
        return fail("padding record" + at(pos) + " has length " + std::to_string(h.length) +
                    ", expected " + std::to_string(to_end));
      }
      if (h.length > avail) {
        return fail("padding record" + at(pos) + " is longer than the " + std::to_string(avail) +
                    " bytes published");
      }
      head_ += to_end;
      ++padding_skipped_;
      store_head();
      continue;
    }
    if (h.length < sizeof(RecordHeader)) {
      return fail("record length " + std::to_string(h.length) + at(pos) +
                  " is shorter than its header");
    }
    if (h.length > capacity_ / 2) {
      return fail("record length " + std::to_string(h.length) + at(pos) + " exceeds capacity / 2");
    }
    if (h.length > avail) {
      return fail("record length " + std::to_string(h.length) + at(pos) + " exceeds the " +
                  std::to_string(avail) + " bytes published");
    }
    if (h.length > to_end) {
      return fail("record length " + std::to_string(h.length) + at(pos) + " crosses the end");
    }
    // avail and to_end are multiples of 8, so the rounded-up length fits in both too.
    pending_ = align_up(h.length);
    current_ = RecordView{h.type, static_cast<uint32_t>(h.length - sizeof(RecordHeader)),
                          data_ + pos + sizeof(RecordHeader)};
    return current_;
  }
  return fail("padding record follows padding record");
}

void RingConsumer::consume() {
  if (pending_ == 0) return;
  head_ += pending_;
  pending_ = 0;
  current_ = RecordView{};
  store_head();
}

}  // namespace kvpool::shm
