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

constexpr uint32_t kChunkWords = kTokensPerChunk / 2;

constexpr uint32_t chunks_for(size_t tokens) {
  return static_cast<uint32_t>((tokens + kTokensPerChunk - 1) / kTokensPerChunk);
}

constexpr uint32_t key_chunks_for(size_t bytes) {
  return static_cast<uint32_t>((bytes + kKeyBytesPerChunk - 1) / kKeyBytesPerChunk);
}

constexpr uint64_t token_pair(const uint32_t* t, size_t have) {
  return uint64_t{t[0]} | (have > 1 ? uint64_t{t[1]} << 32 : 0);
}

// The token area starts where the slots end.
constexpr uint64_t token_area_offset(uint32_t capacity) {
  return sizeof(EventRingHeader) + uint64_t{capacity} * sizeof(EventSlot);
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
  const uint32_t chunks = event_token_chunks(capacity);
  auto* area =
      reinterpret_cast<TokenChunk*>(static_cast<char*>(memory) + token_area_offset(capacity));
  for (uint32_t i = 0; i < chunks; ++i) new (&area[i]) TokenChunk{};  // owner 0: no event's
  h->token_chunks = chunks;
  h->token_chunk_bytes = sizeof(TokenChunk);
  h->next_id.store(1, std::memory_order_release);
  EventRingWriter w;
  w.header_ = h;
  w.slots_ = slots;
  w.chunks_ = area;
  w.mask_ = capacity - 1;
  w.token_mask_ = chunks - 1;
  w.next_id_ = 1;
  return w;
}

void EventRingWriter::write_chunk(uint64_t id, uint64_t shape, const uint64_t* words) {
  TokenChunk& c = chunks_[next_chunk_ & token_mask_];
  // Seqlock write, as for a slot: odd word, fence, contents, even word with release.
  const uint64_t s = c.seq.load(std::memory_order_relaxed);
  c.seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  c.owner.store(id, std::memory_order_relaxed);
  c.shape.store(shape, std::memory_order_relaxed);
  for (uint32_t w = 0; w < kChunkWords; ++w) c.words[w].store(words[w], std::memory_order_relaxed);
  c.seq.store(s + 2, std::memory_order_release);
  ++next_chunk_;
}

void EventRingWriter::write_extras(uint64_t id, std::span<const uint32_t> tokens,
                                   std::span<const std::byte> key, EventPayload& p) {
  // Half the area at most: a record's chunks must not overwrite the previous record's
  // before a reader that keeps up could copy them. The key first: it names the block.
  const uint32_t half = (token_mask_ + 1) / 2;
  uint32_t t = tokens.empty() || tokens.size() > kEventMaxTokens ? 0 : chunks_for(tokens.size());
  uint32_t k = key.empty() || key.size() > kEventMaxKeyBytes ? 0 : key_chunks_for(key.size());
  if (k > half) k = 0;
  if (t > half || t + k > half) t = 0;
  if (!tokens.empty() && t == 0) ++tokens_left_out_;
  if (!key.empty() && k == 0) ++keys_left_out_;
  if (t + k == 0) return;
  p.token_slot = static_cast<uint32_t>(next_chunk_ & token_mask_);
  uint64_t words[kChunkWords];
  for (uint32_t part = 0; part < t; ++part) {
    const size_t base = size_t{part} * kTokensPerChunk;
    for (uint32_t w = 0; w < kChunkWords; ++w) {
      const size_t at = base + size_t{w} * 2;
      words[w] = at < tokens.size() ? token_pair(&tokens[at], tokens.size() - at) : 0;
    }
    write_chunk(id, uint64_t{part} | uint64_t{tokens.size()} << 32, words);
  }
  const uint64_t key_shape = uint64_t{static_cast<uint32_t>(key.size()) | kKeyChunkBit} << 32;
  for (uint32_t part = 0; part < k; ++part) {
    const size_t base = size_t{part} * kKeyBytesPerChunk;
    for (uint32_t w = 0; w < kChunkWords; ++w) {
      uint64_t v = 0;
      for (size_t b = 0; b < 8; ++b) {
        const size_t at = base + size_t{w} * 8 + b;
        if (at < key.size()) v |= uint64_t{std::to_integer<uint8_t>(key[at])} << (8 * b);
      }
      words[w] = v;
    }
    write_chunk(id, part | key_shape, words);
  }
  if (t != 0) p.flags |= kEventHasTokens;
  if (k != 0) p.flags |= kEventHasKey;
}

uint64_t EventRingWriter::append(std::span<EventPayload> records,
                                 std::span<const std::span<const uint32_t>> tokens,
                                 std::span<const std::span<const std::byte>> keys) {
  const uint64_t first = next_id_;
  const auto n = static_cast<uint32_t>(records.size());
  const bool with_tokens = tokens.size() == records.size();
  const bool with_keys = keys.size() == records.size();
  for (uint32_t i = 0; i < n; ++i) {
    EventPayload& p = records[i];
    p.batch_id = first;
    p.batch_size = n;
    // The producer's own facts (parent, tier) stay; the batch, token and key flags are set here.
    p.flags = static_cast<uint8_t>(p.flags & (kEventHasParent | kEventTierDisk));
    p.token_slot = 0;
    if (i == 0) p.flags |= kEventBatchFirst;
    if (i + 1 == n) p.flags |= kEventBatchLast;
    const uint64_t id = first + i;
    // The chunks before the record: the record's release store below publishes them too.
    if (with_tokens || with_keys)
      write_extras(id, with_tokens ? tokens[i] : std::span<const uint32_t>(),
                   with_keys ? keys[i] : std::span<const std::byte>(), p);
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
  // A producer from before the token area has none: its ring ends with the slots.
  const uint64_t need =
      h->token_chunks == 0 ? token_area_offset(h->capacity) : event_ring_bytes(h->capacity);
  if (bytes < need)
    return Status(ErrorCode::kInvalidArgument, "event ring of " + std::to_string(h->capacity) +
                                                   " slots does not fit its " +
                                                   std::to_string(bytes) + " bytes");
  EventRingReader r;
  r.header_ = h;
  r.slots_ = reinterpret_cast<const EventSlot*>(static_cast<const char*>(memory) +
                                                sizeof(EventRingHeader));
  r.mask_ = h->capacity - 1;
  r.position_ = 1;
  // The token area, if the producer has one (older producers leave these words zero).
  const uint32_t chunks = h->token_chunks;
  if (chunks != 0) {
    if (h->token_chunk_bytes != sizeof(TokenChunk) || !std::has_single_bit(chunks) ||
        chunks != event_token_chunks(h->capacity))
      return Status(ErrorCode::kVersionMismatch,
                    "event ring token area of " + std::to_string(chunks) + " chunks of " +
                        std::to_string(h->token_chunk_bytes) + " bytes does not fit its ring");
    r.chunks_ = reinterpret_cast<const TokenChunk*>(static_cast<const char*>(memory) +
                                                    token_area_offset(h->capacity));
    r.token_chunks_ = chunks;
  }
  return r;
}

bool EventRingReader::copy_chunk(uint32_t index, uint64_t id, uint32_t part, uint64_t* shape,
                                 uint64_t* words) const {
  const TokenChunk& c = chunks_[index & (token_chunks_ - 1)];
  const uint64_t s1 = c.seq.load(std::memory_order_acquire);
  const uint64_t owner = c.owner.load(std::memory_order_relaxed);
  *shape = c.shape.load(std::memory_order_relaxed);
  for (uint32_t w = 0; w < kChunkWords; ++w) words[w] = c.words[w].load(std::memory_order_relaxed);
  if (token_hook_ != nullptr) token_hook_(token_hook_arg_);
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t s2 = c.seq.load(std::memory_order_relaxed);
  // Torn (written while we copied), or reused by a later record: gone.
  return (s1 & 1) == 0 && s1 == s2 && owner == id && static_cast<uint32_t>(*shape) == part;
}

bool EventRingReader::read_tokens(const EventRecord& record, std::vector<uint32_t>* out) const {
  out->clear();
  if (!record.has_tokens() || chunks_ == nullptr || record.payload.token_slot >= token_chunks_)
    return false;
  uint64_t count = 0;
  uint32_t parts = 1;  // known once the first chunk is read
  uint64_t words[kChunkWords];
  for (uint32_t part = 0; part < parts; ++part) {
    uint64_t shape = 0;
    if (!copy_chunk(record.payload.token_slot + part, record.event_id, part, &shape, words) ||
        (part > 0 && shape >> 32 != count)) {
      out->clear();
      return false;
    }
    if (part == 0) {
      count = shape >> 32;
      parts = chunks_for(count);
      if (count == 0 || count > kEventMaxTokens || parts > token_chunks_) return false;
      out->reserve(count);
    }
    for (uint32_t w = 0; w < kChunkWords && out->size() < count; ++w) {
      out->push_back(static_cast<uint32_t>(words[w]));
      if (out->size() < count) out->push_back(static_cast<uint32_t>(words[w] >> 32));
    }
  }
  return true;
}

bool EventRingReader::read_key(const EventRecord& record, std::vector<std::byte>* out) const {
  out->clear();
  if (!record.has_key() || chunks_ == nullptr || record.payload.token_slot >= token_chunks_)
    return false;
  uint64_t words[kChunkWords];
  uint64_t shape = 0;
  // The key's chunks follow the token chunks: their count is in the first token chunk.
  uint32_t at = record.payload.token_slot;
  if (record.has_tokens()) {
    if (!copy_chunk(at, record.event_id, 0, &shape, words)) return false;
    const uint64_t count = shape >> 32;
    if (count == 0 || count > kEventMaxTokens) return false;
    at += chunks_for(count);
  }
  uint64_t bytes = 0;
  uint32_t parts = 1;  // known once the first key chunk is read
  for (uint32_t part = 0; part < parts; ++part) {
    const uint64_t want = uint64_t{static_cast<uint32_t>(bytes) | kKeyChunkBit};
    if (!copy_chunk(at + part, record.event_id, part, &shape, words) ||
        (part > 0 && shape >> 32 != want)) {
      out->clear();
      return false;
    }
    if (part == 0) {
      if (((shape >> 32) & kKeyChunkBit) == 0) return false;
      bytes = (shape >> 32) & ~uint64_t{kKeyChunkBit};
      parts = key_chunks_for(bytes);
      if (bytes == 0 || bytes > kEventMaxKeyBytes || parts > token_chunks_) return false;
      out->reserve(bytes);
    }
    for (uint32_t w = 0; w < kChunkWords; ++w)
      for (uint32_t b = 0; b < 8 && out->size() < bytes; ++b)
        out->push_back(static_cast<std::byte>(words[w] >> (8 * b)));
  }
  return true;
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
