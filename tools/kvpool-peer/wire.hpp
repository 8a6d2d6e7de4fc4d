// kvpool-peer's messages between hosts: UCP active messages, one fixed header each. Control
// messages go eager (UCP_AM_SEND_FLAG_EAGER: their bytes arrive with the callback); block
// bytes go with kAmBlock, eager or rendezvous as UCX chooses, straight from the holder's
// pool memory into the fetcher's freshly allocated block.
//
//   fetcher                         holder
//   Hello {nonce_f}            ->
//                              <-   Challenge {nonce_h, epoch, mac_h}
//   Auth {mac_f}               ->
//                              <-   AuthOk (or Refused, and the endpoint is closed)
//   Fetch {id, pool, fp, n}    ->   (+ n sequence hashes as data)
//                              <-   FetchReply {id, code, k}: k blocks pinned
//                              <-   Block {id, i, hashes, checksum} + bytes, i < k
//
// mac_h = HMAC-SHA256(key, "kvpool-peer holder" | nonce_f | nonce_h), mac_f likewise with
// "kvpool-peer fetcher" | nonce_h | nonce_f: each side proves it knows the cluster key
// without sending it, and a recorded exchange cannot be replayed (fresh nonces).
// Every field is checked by the receiver; a peer is trusted with nothing before AuthOk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kvpool/peer/local_request.hpp"

namespace kvpool::peer {

enum AmId : uint16_t {
  kAmHello = 1,
  kAmChallenge = 2,
  kAmAuth = 3,
  kAmAuthOk = 4,
  kAmRefused = 5,
  kAmFetch = 6,
  kAmFetchReply = 7,
  kAmBlock = 8,
  kAmCount = 9,
};

inline constexpr uint32_t kWireMagic = 0x5750564bu;  // "KVPW"
inline constexpr uint32_t kWireVersion = 1;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;

struct Hello {
  uint32_t magic;
  uint32_t version;
  uint8_t nonce[kNonceBytes];
  char name[kPeerNameBytes];  // the fetcher's peer name, for logs and metrics
};

struct Challenge {
  uint32_t magic;
  uint32_t version;
  uint64_t epoch;  // the holder's start epoch: a restarted holder has another
  uint8_t nonce[kNonceBytes];
  uint8_t mac[kMacBytes];
  char name[kPeerNameBytes];
};

struct Auth {
  uint8_t mac[kMacBytes];
};

struct Refused {
  uint32_t code;  // ErrorCode
  uint32_t reserved;
  char message[184];
};

struct FetchRequest {
  uint64_t id;           // the fetcher's, echoed in the reply and every block
  uint64_t fingerprint;  // of the fetcher's pool (layout_fingerprint); must equal the holder's
  uint32_t deadline_ms;  // how long the holder may keep the blocks pinned for this transfer
  uint32_t count;        // sequence hashes in the data, 1..kMaxFetchHashes
  char pool[kPeerNameBytes];
};

struct FetchReply {
  uint64_t id;
  uint64_t epoch;
  uint64_t fingerprint;
  uint32_t code;   // ErrorCode; kOk: `count` blocks follow (0: the holder has none of them)
  uint32_t count;  // the leading hashes the holder pinned and is sending
  uint64_t block_bytes;
  char message[128];
};

struct BlockHeader {
  uint64_t id;
  uint64_t epoch;
  uint32_t index;       // into the request's hashes
  uint32_t has_parent;  // 0 or 1
  uint64_t sequence_hash;
  uint64_t block_hash;
  uint64_t parent_hash;
  // block_checksum of the bytes: the one the block was registered with, or (registered
  // without one) computed by the holder while pinned
  uint64_t checksum;
  uint64_t reserved;  // 0
};

static_assert(std::is_trivially_copyable_v<Hello> && std::is_trivially_copyable_v<Challenge> &&
              std::is_trivially_copyable_v<FetchRequest> &&
              std::is_trivially_copyable_v<FetchReply> &&
              std::is_trivially_copyable_v<BlockHeader>);
static_assert(sizeof(BlockHeader) == 64 && sizeof(FetchRequest) == 88 &&
              sizeof(FetchReply) == 168 && sizeof(Challenge) == 144 && sizeof(Hello) == 104);

}  // namespace kvpool::peer
