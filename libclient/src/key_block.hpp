// The format of a block that holds one opaque key (BatchStore): a 64-byte header, the
// namespaced key, then the value at value_offset. Written by the setter into its own
// mutable block before it registers it; read by others only while they hold a reference
// (so it is never being rewritten or reused under them). Everything read from a block is
// checked against the block's size before use: another client of the pool wrote it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

namespace kvpool::detail {

inline constexpr uint64_t kKeyBlockMagic = 0x3130594b504b564bull;  // "KVKPKY01" little-endian
inline constexpr uint64_t kKeyIndexSeed = 0x6b76706f6f6c6b79ull;   // "kvpoolky"

struct KeyBlockHeader {
  uint64_t magic;
  uint32_t key_bytes;     // of the namespaced key that follows the header
  uint32_t value_offset;  // from the block's start; a multiple of 64
  uint64_t value_bytes;
  uint64_t index_hash;  // what the block is registered under
  uint8_t reserved[32];
};
static_assert(sizeof(KeyBlockHeader) == 64 && std::is_trivially_copyable_v<KeyBlockHeader>);

constexpr uint64_t round_up_64(uint64_t v) { return (v + 63) & ~uint64_t{63}; }

// Where values start in blocks of a store whose keys have at most `max_key_bytes` and whose
// namespace has `namespace_bytes` (the namespaced key's length prefix is 4 bytes).
constexpr uint64_t key_value_offset(uint32_t max_key_bytes, uint32_t namespace_bytes) {
  return round_up_64(sizeof(KeyBlockHeader) + 4 + uint64_t{namespace_bytes} + max_key_bytes);
}

// The namespaced key: u32 little-endian namespace length, the namespace, the key. Two keys
// are the same stored key only when both parts are equal byte for byte.
inline void namespaced_key(const std::string& ns, std::span<const std::byte> key,
                           std::string& out) {
  out.clear();
  const auto n = static_cast<uint32_t>(ns.size());
  const char len[4] = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 24)};
  out.append(len, 4);
  out.append(ns);
  out.append(reinterpret_cast<const char*>(key.data()), key.size());
}

// Whether `block` (block_bytes long) holds `nkey` under `hash`; on a yes, where its value is.
inline bool key_block_matches(const std::byte* block, uint64_t block_bytes, const std::string& nkey,
                              uint64_t hash, uint64_t* value_offset, uint64_t* value_bytes) {
  KeyBlockHeader h;
  std::memcpy(&h, block, sizeof(h));
  if (h.magic != kKeyBlockMagic || h.index_hash != hash || h.key_bytes != nkey.size()) return false;
  if (sizeof(h) + uint64_t{h.key_bytes} > h.value_offset || h.value_offset > block_bytes ||
      h.value_bytes > block_bytes - h.value_offset)
    return false;
  if (std::memcmp(block + sizeof(h), nkey.data(), nkey.size()) != 0) return false;
  *value_offset = h.value_offset;
  *value_bytes = h.value_bytes;
  return true;
}

inline void write_key_block(std::byte* block, const std::string& nkey, uint64_t hash,
                            uint32_t value_offset, const void* value, uint64_t value_bytes) {
  KeyBlockHeader h{};
  h.magic = kKeyBlockMagic;
  h.key_bytes = static_cast<uint32_t>(nkey.size());
  h.value_offset = value_offset;
  h.value_bytes = value_bytes;
  h.index_hash = hash;
  std::memcpy(block, &h, sizeof(h));
  std::memcpy(block + sizeof(h), nkey.data(), nkey.size());
  if (value_bytes != 0) std::memcpy(block + value_offset, value, value_bytes);
}

}  // namespace kvpool::detail
