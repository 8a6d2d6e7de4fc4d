// What travels between a client and kvpoold: socket handshake messages and ring records.
// Every field a client writes is validated by the daemon before use.
//
// Handshake (SOCK_SEQPACKET, SO_PEERCRED gives the peer's pid and uid):
//   client -> Hello
//   daemon -> Welcome + fds [control (read-only), client segment, doorbell eventfd,
//                            then, in pool order, for each pool of Welcome::pool_mask:
//                            its registry segment (read-only), then its data fd when its
//                            storage travels as a descriptor (welcome_carries_fd): host
//                            pools; device pools publish a CUDA IPC handle in their
//                            registry segment's header instead]          (or Refusal)
//   (an Observe gets the control segment, then the registry segment of each pool of
//    Welcome::pool_mask: the pools its caller may read)
//   client maps, locks its lease mutex from its lease thread, then -> Ready
// Requests then flow on the client's request ring, answers on its response ring. The
// socket stays open: its hang-up (and a pidfd) tells the daemon that the client died.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kvpool/shm/segment_layout.hpp"

namespace kvpool::proto {

inline constexpr uint32_t kHelloMagic = 0x4B565048;  // "KVPH"

enum class MsgType : uint32_t {
  kHello = 1,
  kWelcome = 2,
  kRefusal = 3,
  kReady = 4,
  kObserve = 5,     // kvpoolctl: send me the control segment, attach nothing
  kDisconnect = 6,  // daemon -> attached client, then it hangs up: a Refusal-shaped record
                    // whose code and message say why the client was cut off
};

struct Hello {
  uint32_t magic;
  MsgType type;  // kHello or kObserve
  uint16_t layout_major;
  uint16_t layout_minor;
  // kvpool::version_packed() of the client's library (0 from clients before 0.1.0, when
  // this was a reserved zero): the daemon logs it, kvpoolctl shows the daemon's own.
  uint32_t client_version;
  char instance[64];
};
static_assert(sizeof(Hello) == 80 && std::is_trivially_copyable_v<Hello>);

// Whether a pool of this storage gets a descriptor in the welcome (after the first three).
// Both sides count the welcome's descriptors with it, so Welcome::num_fds is
// 3 + the number of pools in Welcome::pool_mask (their registry segments) + the number of
// those for which this is true.
inline constexpr bool welcome_carries_fd(shm::StorageKind storage) {
  return storage == shm::StorageKind::kHost;
}

struct Welcome {
  uint32_t magic;
  MsgType type;  // kWelcome
  uint16_t layout_major;
  uint16_t layout_minor;
  uint32_t slot;
  uint32_t generation;
  uint32_t num_fds;
  // Bit i set: this client may use pool i (per-pool allow-lists); only those pools'
  // registry and data descriptors travel in this message (layout 4.0: registries).
  uint32_t pool_mask;
  uint64_t ring_capacity;
};
static_assert(sizeof(Welcome) == 40 && std::is_trivially_copyable_v<Welcome>);

struct Refusal {
  uint32_t magic;
  MsgType type;   // kRefusal, or kDisconnect
  uint16_t code;  // ErrorCode
  uint16_t reserved;
  char message[244];
};
static_assert(sizeof(Refusal) == 256 && std::is_trivially_copyable_v<Refusal>);

struct Ready {
  uint32_t magic;
  MsgType type;  // kReady
};
static_assert(sizeof(Ready) == 8);

// ---- ring records: RecordHeader::type is the opcode ------------------------------------

enum class Opcode : uint32_t {
  kAllocate = 1,          // count = blocks wanted; no payload. Answer: count BlockRefs.
  kRegister = 2,          // payload: count RegisterItem. Answer: count BlockRefs.
  kMatch = 3,             // payload: count u64 sequence hashes. Answer: matched BlockRefs.
  kReleaseMutable = 4,    // payload: count BlockRef. No answer (fire and forget).
  kReleaseImmutable = 5,  // payload: count BlockRef. No answer.
  kPing = 6,              // no payload. Answer: empty.
  // Per-block checksums (host pools; kvpool/core/checksum.hpp). The daemon hashes the
  // bytes itself: a client can ask, never tell.
  kVerify = 7,  // payload: count BlockRef the caller holds (immutable). Answer: count
                // VerifyResult, in order. At most max(1, kChecksumBudgetBytes / block bytes).
  kScrub = 8,   // payload: one ScrubRequest (count 1). Answer: a ScrubSummary, then
                // ScrubSummary::reported ScrubMismatch.
  // A client of the previous daemon, reattached after a restart, takes back what it holds
  // in `pool` (issue 15). payload: one ReclaimHeader, then count ReclaimItem. Answer: the
  // BlockRefs of the items not given back (the client must not use those handles).
  kReclaim = 9,
  // kRegister whose blocks' token ids and/or opaque keys go into the Stored events
  // (RegisterOptions::send_tokens; a BatchStore's keys). payload: one RegisterExtrasHeader,
  // count RegisterItem, then count * tokens_per_block u32 token ids (item i's at
  // i * tokens_per_block), then, when key_bytes > 0, count u32 key lengths and the keys'
  // key_bytes bytes one after the other (register_extras_bytes). Answer: as kRegister.
  kRegisterTokens = 10,
  // Opaque keys (libclient's BatchStore, docs/design.md §6b): a key's block is found by a 64-bit
  // index hash, and the key itself is checked in the block by the client.
  // kLookup: payload count u64 sequence hashes. Answer: count BlockRefs, one per hash in
  // order; a hit takes a reference (as kMatch), a miss is {kNoBlock, 0}. No prefix stop.
  kLookup = 11,
  // kRemove: payload count BlockRefs of immutable blocks the caller holds. Each still
  // registered leaves the registry (a Removed event; freed at its last release). Answer:
  // count BlockRefs, the block where it was removed, {kNoBlock, 0} where it was no longer
  // registered. Any client of a pool may remove what it can match (one trust domain).
  kRemove = 12,
  // A kMatch whose prefix may continue on the pool's disk tier (issue 28, docs/disk-tier.md):
  // payload and answer as kMatch. Where host memory's prefix ends and the disk holds what
  // follows, kvpoold reads those blocks into new host blocks, verifies their checksums,
  // registers them, and answers when the reads are done (other requests, this client's
  // too, are answered meanwhile: match answers by correlation id). A pool without a disk
  // tier answers as kMatch.
  kMatchOnboard = 13,
};
inline constexpr uint32_t kMaxOpcode = 13;
// A kLookup miss and a kRemove no-op in an answer.
inline constexpr uint32_t kNoBlock = 0xFFFFFFFFu;

inline bool opcode_answers(Opcode op) {
  return op != Opcode::kReleaseMutable && op != Opcode::kReleaseImmutable;
}

inline bool opcode_known(uint32_t type) { return type != 0 && type <= kMaxOpcode; }

// Response record type of the answer to an unknown opcode.
inline constexpr uint32_t kUnknownAnswerType = 0xFFFFu;

// Whether a record of `type` gets an answer: every opcode but the releases, and unknown
// opcodes too (with an error).
inline bool record_answers(uint32_t type) {
  return !opcode_known(type) || opcode_answers(static_cast<Opcode>(type));
}

// The response record type of the answer to a record of `type`.
inline uint32_t answer_type(uint32_t type) {
  return opcode_known(type) ? type : kUnknownAnswerType;
}

// A block handle as it travels (and as the pool core hands it out): {id, generation}.
struct BlockRef {
  uint32_t id;
  uint32_t generation;
  friend bool operator==(const BlockRef&, const BlockRef&) = default;
};
static_assert(sizeof(BlockRef) == 8 && std::is_trivially_copyable_v<BlockRef>);

// One block of a kRegister payload.
struct RegisterItem {
  BlockRef block;  // a mutable block of the caller, committed
  uint64_t sequence_hash;
  uint64_t block_hash;
  uint64_t parent_hash;  // valid when has_parent
  uint32_t priority;
  uint32_t has_parent;  // 0 or 1 (u32 so the struct has no padding: it travels in shm)
  // XXH3-64 of the block's bytes computed by the registering client (block_checksum),
  // 0: none. Last and defaulted, so that initialisers without it still mean "none".
  uint64_t checksum = 0;
};
static_assert(sizeof(RegisterItem) == 48 && std::is_trivially_copyable_v<RegisterItem>);
static_assert(offsetof(RegisterItem, checksum) == 40, "no padding: the record travels in shm");

// Heads a kRegisterTokens payload. tokens_per_block is 0 (no token ids) or the pool's
// page_size (a block registers only when complete), at most kMaxRegisterTokens. key_bytes
// is 0 (no keys) or the total bytes of the keys (then each item has a key length, 0 for
// "none", each at most kMaxRegisterKeyBytes). Before keys, key_bytes was a reserved 0, so
// an older kvpoold refuses a register with keys ("reserved ... must be 0").
struct RegisterExtrasHeader {
  uint32_t tokens_per_block;
  uint32_t key_bytes;
};
static_assert(sizeof(RegisterExtrasHeader) == 8 &&
              std::is_trivially_copyable_v<RegisterExtrasHeader>);
// Most tokens per block a kRegisterTokens carries: what one event-ring record can carry
// (shm::kEventMaxTokens, event_ring.hpp).
inline constexpr uint32_t kMaxRegisterTokens = 4096;
// Most bytes of one block's key (shm::kEventMaxKeyBytes).
inline constexpr uint32_t kMaxRegisterKeyBytes = 4096;

// Bytes of a kRegisterTokens payload of `count` blocks of `tokens_per_block` tokens and
// keys of `key_bytes` in all (0: no key section).
inline uint64_t register_extras_bytes(uint32_t count, uint32_t tokens_per_block,
                                      uint64_t key_bytes = 0) {
  return sizeof(RegisterExtrasHeader) +
         uint64_t{count} * (sizeof(RegisterItem) + uint64_t{tokens_per_block} * sizeof(uint32_t)) +
         (key_bytes == 0 ? 0 : uint64_t{count} * sizeof(uint32_t) + key_bytes);
}

// ---- checksum requests (kVerify, kScrub) -------------------------------------------------
// Their answers reuse the common framing: ResponseHeader::count counts 8-byte words (a
// BlockRef for the other opcodes), so one reader parses every answer.

// Most block bytes one kVerify or kScrub hashes (at least one block), on the engine thread
// that serves every client: ~1 ms at the 4 GiB/s kvpool_checksum_bench measured on a busy
// 2-core machine (XXH3 itself runs at 10+ GiB/s on an idle core).
inline constexpr uint64_t kChecksumBudgetBytes = 4ull << 20;
// Most blocks one kScrub step looks at (free ones cost a metadata read each).
inline constexpr uint32_t kMaxScrubVisit = 65536;
// Most mismatches one kScrub answer describes; a step stops when it has that many.
inline constexpr uint32_t kMaxScrubReported = 32;

enum class ChecksumOutcome : uint32_t {
  kOk = 0,        // the bytes match the registered checksum
  kMismatch = 1,  // they do not: the block was evicted (poisoned)
  kNone = 2,      // registered without a checksum: nothing to compare
};

struct VerifyResult {  // one word of a kVerify answer
  uint32_t block;      // the BlockRef's id
  uint32_t outcome;    // ChecksumOutcome
};
static_assert(sizeof(VerifyResult) == 8 && std::is_trivially_copyable_v<VerifyResult>);

struct ScrubRequest {
  uint32_t start_block;  // first block id to look at
  uint32_t reserved;     // 0
  uint64_t byte_budget;  // bytes to hash at most (0: kChecksumBudgetBytes, its cap too)
};
static_assert(sizeof(ScrubRequest) == 16 && std::is_trivially_copyable_v<ScrubRequest>);

struct ScrubSummary {
  uint32_t next_block;  // where the next step starts; num_blocks once the pool is done
  uint32_t checked;     // checksummed blocks hashed
  uint32_t mismatches;  // of which failed (now evicted)
  uint32_t skipped;     // registered blocks without a checksum
  uint32_t reported;    // ScrubMismatch records that follow
  uint32_t reserved[3];
};
static_assert(sizeof(ScrubSummary) == 32 && std::is_trivially_copyable_v<ScrubSummary>);

struct ScrubMismatch {
  uint32_t block;
  uint32_t generation;
  uint64_t sequence_hash;
};
static_assert(sizeof(ScrubMismatch) == 16 && std::is_trivially_copyable_v<ScrubMismatch>);

// Words of the largest kScrub answer.
inline constexpr uint32_t kScrubAnswerWords =
    (sizeof(ScrubSummary) + kMaxScrubReported * sizeof(ScrubMismatch)) / 8;

// ---- reattach after a restart (kReclaim) -------------------------------------------------
// Who the client was under the previous daemon. The daemon gives back only what that
// client's process held there: the previous slot's pid must be the caller's, its process
// still the one that held the slot, and the epoch the one the daemon adopted from.
struct ReclaimHeader {
  uint64_t previous_epoch;  // ControlHeader::restart.epoch of the daemon that died
  uint32_t previous_slot;
  uint32_t previous_slot_generation;
  uint32_t flags;     // kReclaimFinal: the last one; what was not claimed is released
  uint32_t reserved;  // 0
};
static_assert(sizeof(ReclaimHeader) == 24 && std::is_trivially_copyable_v<ReclaimHeader>);
inline constexpr uint32_t kReclaimFinal = 1;

// One block the client still holds.
struct ReclaimItem {
  BlockRef block;
  uint32_t references;  // immutable references held; 0: a mutable block
  uint32_t reserved;    // 0
};
static_assert(sizeof(ReclaimItem) == 16 && std::is_trivially_copyable_v<ReclaimItem>);

struct RequestHeader {
  uint64_t correlation_id;
  uint32_t pool;   // index in the control segment's PoolInfo table
  uint32_t count;  // items in the payload (or blocks for kAllocate)
};
static_assert(sizeof(RequestHeader) == 16 && std::is_trivially_copyable_v<RequestHeader>);

struct ResponseHeader {
  uint64_t correlation_id;
  uint16_t status;  // ErrorCode
  uint16_t reserved;
  uint32_t count;        // 8-byte words that follow: BlockRefs (see kVerify, kScrub)
  uint32_t message_len;  // bytes of error text after the words
  uint32_t reserved2;
};
static_assert(sizeof(ResponseHeader) == 24 && std::is_trivially_copyable_v<ResponseHeader>);

inline constexpr uint32_t kMaxErrorMessage = 512;

// Bytes a payload of `count` items of a request needs.
inline uint64_t request_item_bytes(Opcode op) {
  switch (op) {
    case Opcode::kRegister:
      return sizeof(RegisterItem);
    case Opcode::kMatch:
    case Opcode::kMatchOnboard:
    case Opcode::kLookup:
      return sizeof(uint64_t);
    case Opcode::kReleaseMutable:
    case Opcode::kReleaseImmutable:
    case Opcode::kVerify:
    case Opcode::kRemove:
      return sizeof(BlockRef);
    case Opcode::kScrub:
      return sizeof(ScrubRequest);
    case Opcode::kReclaim:  // after the one ReclaimHeader
      return sizeof(ReclaimItem);
    default:
      return 0;
  }
}

// Bytes the payload of a request of `count` items must have (kAllocate: none).
inline uint64_t request_payload_bytes(Opcode op, uint32_t count) {
  const uint64_t fixed = op == Opcode::kReclaim ? sizeof(ReclaimHeader) : 0;
  return fixed + uint64_t{count} * request_item_bytes(op);
}

}  // namespace kvpool::proto
