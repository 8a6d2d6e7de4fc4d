// The one message a worker sends to its host's kvpool-peer (the peer tier's agent, beside
// kvpoold) and the one answer it gets: "fetch these sequence hashes of pool P from a peer,
// within D ms". Carried over a Unix SOCK_SEQPACKET socket in the runtime dir
// (peer_socket_path), one request per connection: the agent keeps the fetched blocks
// registered (one reference each) until the worker closes the connection, so that the
// worker's local match that follows finds them even under eviction pressure.
//
// Plain, fixed-size, little-endian records; every field is checked by the agent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace kvpool::peer {

inline constexpr uint32_t kLocalRequestMagic = 0x5250564bu;  // "KVPR"
inline constexpr uint32_t kLocalAnswerMagic = 0x4150564bu;   // "KVPA"
inline constexpr uint32_t kLocalStatusMagic = 0x5350564bu;   // "KVPS": answered with JSON
inline constexpr uint32_t kLocalVersion = 1;
// Most hashes one request may name (a 64k-token prompt of 16-token pages is 4096 blocks).
inline constexpr uint32_t kMaxFetchHashes = 4096;
inline constexpr size_t kPeerNameBytes = 64;

struct LocalRequestHeader {
  uint32_t magic;               // kLocalRequestMagic
  uint32_t version;             // kLocalVersion
  uint32_t deadline_ms;         // the whole fetch, from the agent's receipt; 1..60000
  uint32_t count;               // sequence hashes that follow, 1..kMaxFetchHashes
  char pool[kPeerNameBytes];    // local pool name, NUL-terminated
  char holder[kPeerNameBytes];  // "" (look it up) or the holder's peer address "host:port"
  uint64_t parent;              // the sequence hash before the first one (valid if has_parent)
  uint32_t has_parent;          // 0: the first hash starts its sequence
  uint32_t reserved;            // 0
  // followed by count u64 sequence hashes: the prefix to fetch, in order
};
static_assert(sizeof(LocalRequestHeader) == 160 &&
              std::is_trivially_copyable_v<LocalRequestHeader>);

struct LocalAnswer {
  uint32_t magic;    // kLocalAnswerMagic
  uint32_t code;     // kvpool::ErrorCode: kOk (fetched may still be 0), or why nothing came
  uint32_t fetched;  // leading hashes now registered in the local pool
  uint32_t reserved;
  char message[240];  // why fewer than asked arrived (NUL-terminated; "" when all did)
};
static_assert(sizeof(LocalAnswer) == 256 && std::is_trivially_copyable_v<LocalAnswer>);

// Where instance `instance`'s kvpool-peer listens: beside kvpoold's socket.
inline std::string peer_socket_path(std::string_view runtime_dir, std::string_view instance) {
  return std::string(runtime_dir) + "/" + std::string(instance) + ".peer.sock";
}

inline void copy_name(char (&dst)[kPeerNameBytes], std::string_view src) {
  size_t n = src.size() < kPeerNameBytes - 1 ? src.size() : kPeerNameBytes - 1;
  for (size_t i = 0; i < kPeerNameBytes; ++i) dst[i] = i < n ? src[i] : '\0';
}

inline std::string_view name_of(const char (&src)[kPeerNameBytes]) {
  size_t n = 0;
  while (n < kPeerNameBytes && src[n] != '\0') ++n;
  return {src, n};
}

}  // namespace kvpool::peer
