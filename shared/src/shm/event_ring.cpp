#include "kvpool/shm/event_ring.hpp"

#include <bit>
#include <cstring>
#include <string>

namespace kvpool::shm {
namespace {

constexpr size_t kWords = sizeof(EventPayload) / sizeof(uint64_t);

void store_payload(EventSlot& slot, const EventPayload& p) {
  uint64_t words[kWords];
  std::memcpy(words, &p, sizeof(words));
  for (size_t i = 0; i < kWords; ++i) slot.words[i].store(words[i], std::memory_order_relaxed);
}

void load_payload(const EventSlot& slot, EventPayload* p) {
  uint64_t words[kWords];
  for (size_t i = 0; i < kWords; ++i) words[i] = slot.words[i].load(std::memory_order_relaxed);
  std::memcpy(p, words, sizeof(words));
}

}  // namespace

Status check_event_ring_capacity(uint64_t capacity) {
  if (capacity < 2 || capacity > kEventRingMaxCapacity || !std::has_single_bit(capacity)) {
    return Status(ErrorCode::kInvalidArgument, "event ring capacity must be a power of two in 2.." +
                                                   std::to_string(kEventRingMaxCapacity) +
                                                   " slots (got " + std::to_string(capacity) + ")");
  }
  return Status::ok();
}

Result<EventRingWriter> EventRingWriter::create(void* memory, size_t bytes, uint32_t capacity) {
  KVPOOL_RETURN_IF_ERROR(check_event_ring_capacity(capacity));
  if (memory == nullptr || reinterpret_cast<uintptr_t>(memory) % 64 != 0)
    return Status(ErrorCode::kInvalidArgument, "event ring memory must be 64-byte aligned");
  if (bytes < event_ring_bytes(capacity)) {
    return Status(ErrorCode::kInvalidArgument, "event ring of " + std::to_string(capacity) +
                                                   " slots needs " +
                                                   std::to_string(event_ring_bytes(capacity)) +
                                                   " bytes, got " + std::to_string(bytes));
  }
  auto* h = new (memory) EventRingHeader{};
  h->magic = kEventRingMagic;
  h->capacity = capacity;
  h->slot_bytes = sizeof(EventSlot);
  auto* slots = reinterpret_cast<EventSlot*>(static_cast<char*>(memory) + sizeof(EventRingHeader));
  for (uint32_t i = 0; i < capacity; ++i) new (&slots[i]) EventSlot{};
  h->next_id.store(1, std::memory_order_release);
  EventRingWriter w;
  w.header_ = h;
  w.slots_ = slots;
  w.mask_ = capacity - 1;
  w.next_id_ = 1;
  return w;
}

uint64_t EventRingWriter::append(std::span<EventPayload> records) {
  const uint64_t first = next_id_;
  const auto n = static_cast<uint32_t>(records.size());
  for (uint32_t i = 0; i < n; ++i) {
    EventPayload& p = records[i];
    p.batch_id = first;
    p.batch_size = n;
    p.flags = static_cast<uint8_t>(p.flags & kEventHasParent);
    if (i == 0) p.flags |= kEventBatchFirst;
    if (i + 1 == n) p.flags |= kEventBatchLast;
    const uint64_t id = first + i;
    EventSlot& slot = slots_[id & mask_];
    // Seqlock write: odd word first, then the payload, then the even word with release.
    slot.seq.store(2 * id + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    store_payload(slot, p);
    slot.seq.store(2 * id, std::memory_order_release);
  }
  next_id_ = first + n;
  if (n > 0) header_->next_id.store(next_id_, std::memory_order_release);
  return first;
}

Result<EventRingReader> EventRingReader::attach(const void* memory, size_t bytes) {
  if (memory == nullptr || bytes < sizeof(EventRingHeader))
    return Status(ErrorCode::kInvalidArgument, "event ring too small for its header");
  auto* h = static_cast<const EventRingHeader*>(memory);
  if (h->magic != kEventRingMagic)
    return Status(ErrorCode::kVersionMismatch, "event ring has a bad magic number");
  if (h->slot_bytes != sizeof(EventSlot))
    return Status(ErrorCode::kVersionMismatch,
                  "event ring slots are " + std::to_string(h->slot_bytes) + " bytes, expected " +
                      std::to_string(sizeof(EventSlot)));
  KVPOOL_RETURN_IF_ERROR(check_event_ring_capacity(h->capacity));
  if (bytes < event_ring_bytes(h->capacity))
    return Status(ErrorCode::kInvalidArgument, "event ring of " + std::to_string(h->capacity) +
                                                   " slots does not fit its " +
                                                   std::to_string(bytes) + " bytes");
  EventRingReader r;
  r.header_ = h;
  r.slots_ = reinterpret_cast<const EventSlot*>(static_cast<const char*>(memory) +
                                                sizeof(EventRingHeader));
  r.mask_ = h->capacity - 1;
  r.position_ = 1;
  return r;
}

EventRingReader::Outcome EventRingReader::next(EventRecord* out) {
  if (position_ == 0) position_ = 1;
  const uint64_t pub = published();
  if (position_ >= pub) return Outcome::kEmpty;
  const uint64_t capacity = uint64_t{mask_} + 1;
  auto lapped = [&](uint64_t newest_published) {
    // Slots hold ids newest_published - capacity .. newest_published - 1. The oldest of them
    // may be under overwrite already; if so, its read fails too and counts as one more lost.
    uint64_t oldest = newest_published > capacity ? newest_published - capacity : 1;
    if (oldest <= position_) oldest = position_ + 1;
    lost_ = oldest - position_;
    position_ = oldest;
    return Outcome::kLapped;
  };
  if (pub - position_ > capacity) return lapped(pub);

  const EventSlot& slot = slots_[position_ & mask_];
  const uint64_t want = 2 * position_;
  const uint64_t s1 = slot.seq.load(std::memory_order_acquire);
  if (s1 != want) {
    if (s1 > want) return lapped(published());
    return Outcome::kEmpty;  // not written yet (cannot happen below next_id; be safe)
  }
  EventRecord r;
  r.event_id = position_;
  load_payload(slot, &r.payload);
  if (hook_ != nullptr) hook_(hook_arg_);
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t s2 = slot.seq.load(std::memory_order_relaxed);
  if (s2 != s1) return lapped(published());  // overwritten while we copied: discard
  *out = r;
  ++position_;
  return Outcome::kEvent;
}

}  // namespace kvpool::shm
