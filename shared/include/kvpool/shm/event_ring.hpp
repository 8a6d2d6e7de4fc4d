// The event ring: every Stored / Removed / Cleared change of the registry, in the control
// segment, so local tools (and the NATS forwarder, kvpool-events) tail it without asking the
// daemon (docs/design.md §7).
//
// One producer (the daemon's progress engine), any number of readers in other processes who
// map the control segment read-only: a reader never writes anything, so the producer never
// knows about readers and never waits for them. A reader that falls a full lap behind
// learns it, and how many events it lost, and resynchronises from a snapshot.
//
// Layout, at an offset in the control segment (ControlHeader::event_ring_offset):
//
//   EventRingHeader   2 cache lines: constants | next_id
//   EventSlot[capacity]   64 bytes each, capacity a power of two
//
// Event ids start at 1 and grow by one per record; event `id` lives in slot id & (capacity-1).
// Each slot carries a sequence word (seqlock): 2*id+1 while the producer writes it, 2*id once
// it is complete (stored with release after the payload). A reader loads the word (acquire),
// copies the payload, fences (acquire) and loads the word again: if either load is not 2*id,
// the slot was (or is being) overwritten by a later lap and the copy is discarded. next_id
// (release, after the slots of a whole append) tells readers how far they may read, so a
// reader sees the records of one register call (a batch) together.
//
// A Stored batch is one register call: every record of it carries batch_id (the event id of
// its first record) and batch_size, and the first / last carry kEventBatchFirst / Last.
//
// Token ids (a client's RegisterOptions::send_tokens) travel beside the records, in a token
// area after the slots: TokenChunk[token_chunks], 128 bytes each, a power of two of them.
// A Stored record with kEventHasTokens names its first chunk (token_slot); its tokens fill
// ceil(count / kTokensPerChunk) consecutive chunks (mod token_chunks), each written before
// the record (so a reader that sees the record sees them) and each its own seqlock, naming
// the event id it belongs to and its part index. Chunks are reused in order, so the area
// keeps the tokens of the newest records only: a reader checks owner, part and count of each
// chunk and gets the exact tokens or none (never another block's). Event ids, slots and
// records are the same with or without tokens, and readers that do not ask for tokens never
// read the area.
//
// An opaque key (a BatchStore block's namespaced key, docs/batch-store.md) travels the same
// way: a Stored record with kEventHasKey has ceil(bytes / kKeyBytesPerChunk) key chunks
// right after its token chunks (from token_slot when it has no tokens), each naming the
// event id, its part index within the key and the key's length with kKeyChunkBit set (a
// token reader that meets one sees a count over kEventMaxTokens and takes no tokens). A
// reader that predates keys ignores the flag: it reads the tokens as before.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "kvpool/core/status.hpp"

namespace kvpool::shm {

inline constexpr uint64_t kEventRingMagic = 0x4B56504556524E47ull;    // "KVPEVRNG"
inline constexpr uint32_t kEventRingMaxCapacity = uint32_t{1} << 24;  // 1 GiB of slots

enum class EventType : uint8_t {
  kStored = 1,   // a block became registered (one record per block)
  kRemoved = 2,  // a registration ended (eviction)
  kCleared = 3,  // the pool's registry was emptied (kvpoold writes none today; readers
                 // handle it: a future clear operation needs no format change)
};

inline constexpr uint8_t kEventHasParent = 1;   // parent_hash is valid
inline constexpr uint8_t kEventBatchFirst = 2;  // first record of its batch
inline constexpr uint8_t kEventBatchLast = 4;   // last record of its batch
inline constexpr uint8_t kEventHasTokens = 8;   // Stored: token_slot names its token chunks
// Stored / Removed of the pool's disk tier (docs/disk-tier.md), not of its host memory: a
// block may be in both, and each tier has its own Stored and Removed. Readers that predate
// the flag must not take these for host events (kvpool-events and kvpoolctl know it).
inline constexpr uint8_t kEventTierDisk = 16;
// Stored: key chunks follow the record's token chunks (or start at token_slot).
inline constexpr uint8_t kEventHasKey = 32;

// Most token ids one record carries (a block's page_size): a larger block's record carries
// none. Bounds what a reader copies and what one record takes of the token area.
inline constexpr uint32_t kEventMaxTokens = 4096;
// Most key bytes one record carries (a longer key's record carries none).
inline constexpr uint32_t kEventMaxKeyBytes = 4096;

// What one record says. Readers get a copy; the producer fills everything but the batch
// fields, which append() writes.
struct EventPayload {
  uint64_t sequence_hash;  // Stored / Removed (Dynamo router: "block_hash")
  uint64_t block_hash;     // Stored: the block-local hash (Dynamo router: "tokens_hash")
  uint64_t parent_hash;    // Stored with kEventHasParent: the parent's sequence hash
  uint64_t batch_id;       // event id of the first record of this record's batch
  uint64_t time_ns;        // CLOCK_REALTIME when the batch was appended
  uint32_t priority;       // Stored: eviction priority
  uint32_t batch_size;     // records in this record's batch
  uint16_t pool;           // pool index (PoolInfo order)
  uint8_t type;            // EventType
  uint8_t flags;           // kEventHasParent | kEventBatchFirst | ...Last | ...Tokens | ...TierDisk
                           // | ...HasKey
  uint32_t token_slot;     // with kEventHasTokens or kEventHasKey: the first TokenChunk (else 0)
};
static_assert(std::is_standard_layout_v<EventPayload> &&
              std::is_trivially_copyable_v<EventPayload>);
static_assert(sizeof(EventPayload) == 56);
static_assert(offsetof(EventPayload, batch_id) == 24 && offsetof(EventPayload, priority) == 40 &&
              offsetof(EventPayload, pool) == 48 && offsetof(EventPayload, flags) == 51);

struct EventSlot {
  std::atomic<uint64_t> seq;  // 2*id+1 while written, 2*id when complete; 0 never written
  // The payload as words, each read and written with relaxed atomic accesses: the seqlock
  // tolerates a torn copy (it is detected and discarded), the memory model a data race not.
  std::atomic<uint64_t> words[7];
};
static_assert(std::is_standard_layout_v<EventSlot>);
static_assert(sizeof(EventSlot) == 64);
static_assert(sizeof(EventSlot::words) == sizeof(EventPayload));
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// One chunk of a Stored record's token ids in the token area (a seqlock of its own: the
// word is odd while the producer writes the chunk, and grows by 2 per write).
inline constexpr uint32_t kTokensPerChunk = 26;
struct TokenChunk {
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> owner;  // event id of the record these tokens belong to (0: none)
  std::atomic<uint64_t> shape;  // part index in the record (low 32) | its token count (high 32)
  std::atomic<uint64_t> words[kTokensPerChunk / 2];  // the tokens, two per word, little end first
};
static_assert(std::is_standard_layout_v<TokenChunk>);
static_assert(sizeof(TokenChunk) == 128);
// A key chunk carries 104 bytes (the same 13 words, little end first); its shape's high half
// is the key's length with this bit set, so that no token count can be mistaken for it.
inline constexpr uint32_t kKeyBytesPerChunk = sizeof(TokenChunk::words);
inline constexpr uint32_t kKeyChunkBit = 1u << 31;

// Chunks of the token area of a ring of `capacity` slots: one per two slots, so that the
// tokens of the newest capacity / 2 blocks of up to kTokensPerChunk tokens stay readable.
constexpr uint32_t event_token_chunks(uint64_t capacity) {
  return capacity >= 4 ? static_cast<uint32_t>(capacity / 2) : 2;
}

struct EventRingHeader {
  uint64_t magic;       // kEventRingMagic
  uint32_t capacity;    // slots, a power of two
  uint32_t slot_bytes;  // sizeof(EventSlot)
  // The token area, after the slots. 0 chunks (a producer from before tokens): no tokens.
  uint32_t token_chunks;       // a power of two, or 0
  uint32_t token_chunk_bytes;  // sizeof(TokenChunk)
  uint64_t reserved0[5];
  // offset 64: written by the producer only (release, after a whole append)
  alignas(64) std::atomic<uint64_t> next_id;  // id the next record gets; starts at 1
  uint64_t reserved1[7];
};
static_assert(std::is_standard_layout_v<EventRingHeader>);
static_assert(offsetof(EventRingHeader, capacity) == 8);
static_assert(offsetof(EventRingHeader, token_chunks) == 16 &&
              offsetof(EventRingHeader, token_chunk_bytes) == 20);
static_assert(offsetof(EventRingHeader, next_id) == 64);
static_assert(sizeof(EventRingHeader) == 128);

// A record as a reader receives it.
struct EventRecord {
  uint64_t event_id;
  EventPayload payload;

  EventType type() const { return static_cast<EventType>(payload.type); }
  bool has_parent() const { return (payload.flags & kEventHasParent) != 0; }
  bool batch_first() const { return (payload.flags & kEventBatchFirst) != 0; }
  bool batch_last() const { return (payload.flags & kEventBatchLast) != 0; }
  bool has_tokens() const { return (payload.flags & kEventHasTokens) != 0; }
  bool disk_tier() const { return (payload.flags & kEventTierDisk) != 0; }
  bool has_key() const { return (payload.flags & kEventHasKey) != 0; }
};

// kInvalidArgument unless capacity is a power of two in [2, kEventRingMaxCapacity].
Status check_event_ring_capacity(uint64_t capacity);
// Bytes a ring of `capacity` slots occupies (header + slots + token area).
constexpr uint64_t event_ring_bytes(uint64_t capacity) {
  return sizeof(EventRingHeader) + capacity * sizeof(EventSlot) +
         uint64_t{event_token_chunks(capacity)} * sizeof(TokenChunk);
}

// The producer's view (the daemon). Single-threaded: one writer at a time.
class EventRingWriter {
 public:
  EventRingWriter() = default;
  // Initialises a ring of `capacity` slots in `memory` (64-byte aligned, `bytes` long).
  static Result<EventRingWriter> create(void* memory, size_t bytes, uint32_t capacity);

  // Appends `records` as one batch (batch_id, batch_size and the first/last flags are set
  // here) and publishes them together. Never waits. Returns the id of the first record.
  // An empty span appends nothing and returns next_id().
  // `tokens`: empty, or one span per record (empty: none), written to the token area and
  // flagged kEventHasTokens. A record's tokens are left out (and counted in
  // tokens_left_out) when there are more than kEventMaxTokens or they would take more than
  // half the area. `keys` likewise (kEventHasKey, kEventMaxKeyBytes, keys_left_out); when a
  // record's tokens and key do not fit half the area together, its key goes alone.
  uint64_t append(std::span<EventPayload> records,
                  std::span<const std::span<const uint32_t>> tokens = {},
                  std::span<const std::span<const std::byte>> keys = {});
  uint64_t append(EventPayload record) { return append(std::span<EventPayload>(&record, 1)); }

  uint64_t next_id() const { return next_id_; }
  uint32_t capacity() const { return mask_ + 1; }
  uint32_t token_chunks() const { return token_mask_ + 1; }
  uint64_t tokens_left_out() const { return tokens_left_out_; }
  uint64_t keys_left_out() const { return keys_left_out_; }
  bool valid() const { return header_ != nullptr; }

 private:
  // Writes what fits of `tokens` and `key` of record `p` (event `id`) to the chunks from
  // next_chunk_, and flags and points the record at them.
  void write_extras(uint64_t id, std::span<const uint32_t> tokens, std::span<const std::byte> key,
                    EventPayload& p);
  // One chunk (seqlock write): owner `id`, `shape`, `words`.
  void write_chunk(uint64_t id, uint64_t shape, const uint64_t* words);

  EventRingHeader* header_ = nullptr;
  EventSlot* slots_ = nullptr;
  TokenChunk* chunks_ = nullptr;
  uint32_t mask_ = 0;
  uint32_t token_mask_ = 0;
  uint64_t next_id_ = 1;     // the producer's own copy of header_->next_id
  uint64_t next_chunk_ = 0;  // chunks written so far; the next one is next_chunk_ & token_mask_
  uint64_t tokens_left_out_ = 0;
  uint64_t keys_left_out_ = 0;
};

// A reader's view. Reads only: works on a read-only mapping. Not thread-safe (one reader
// object per thread); any number of readers in any number of processes.
class EventRingReader {
 public:
  enum class Outcome {
    kEvent,   // *out holds the next record
    kEmpty,   // nothing new yet
    kLapped,  // the producer overwrote records before they were read: lost() of them
  };

  EventRingReader() = default;
  // Validates the header (magic, capacity, size) of a ring some producer initialised.
  static Result<EventRingReader> attach(const void* memory, size_t bytes);

  // Reads the next record. On kLapped the reader has already moved past the records it
  // lost (to the oldest one the ring still holds); lost() says how many it skipped, exactly:
  // over a run, records returned + lost add up to the records appended.
  Outcome next(EventRecord* out);
  uint64_t lost() const { return lost_; }

  // Id of the next record this reader will return.
  uint64_t position() const { return position_; }
  // Moves to `id` (clamped to what the ring can still hold on the next read).
  void seek(uint64_t id) { position_ = id; }
  // Skips everything published so far: only new records from here on.
  void seek_to_end() { position_ = published(); }
  // Id the producer's next record will get (everything below it is published).
  uint64_t published() const { return header_->next_id.load(std::memory_order_acquire); }
  uint32_t capacity() const { return mask_ + 1; }
  bool valid() const { return header_ != nullptr; }

  // The token ids of `record` (one next() returned, kEventHasTokens), copied into *out:
  // true with exactly the tokens the producer wrote, false (and *out empty) when the record
  // has none or they were overwritten (a reader more than token_chunks chunks behind) or
  // torn while copied. May be called any time after next(); never returns other tokens.
  bool read_tokens(const EventRecord& record, std::vector<uint32_t>* out) const;
  // The key of `record` (kEventHasKey), copied into *out: the exact bytes the producer wrote,
  // or false (and *out empty), as read_tokens.
  bool read_key(const EventRecord& record, std::vector<std::byte>* out) const;
  uint32_t token_chunks() const { return token_chunks_; }

  // Tests only: called between copying a slot and re-checking its sequence word, so a test
  // can overwrite the slot exactly there and see the torn copy rejected.
  void set_after_copy_hook_for_testing(void (*hook)(void*), void* arg) {
    hook_ = hook;
    hook_arg_ = arg;
  }
  // Tests only: the same between copying a token chunk and re-checking its word.
  void set_token_copy_hook_for_testing(void (*hook)(void*), void* arg) {
    token_hook_ = hook;
    token_hook_arg_ = arg;
  }

 private:
  const EventRingHeader* header_ = nullptr;
  const EventSlot* slots_ = nullptr;
  const TokenChunk* chunks_ = nullptr;  // null when the producer has no token area
  uint32_t token_chunks_ = 0;
  uint32_t mask_ = 0;
  uint64_t position_ = 1;
  uint64_t lost_ = 0;
  void (*hook_)(void*) = nullptr;
  void* hook_arg_ = nullptr;
  void (*token_hook_)(void*) = nullptr;
  void* token_hook_arg_ = nullptr;

  // Copies chunk `index` of record `id` (seqlock): true when it is whole, still the
  // record's, and part `part` of it; *shape and words then hold what it says.
  bool copy_chunk(uint32_t index, uint64_t id, uint32_t part, uint64_t* shape,
                  uint64_t* words) const;
};

}  // namespace kvpool::shm
