#include "kvpool/core/hash.hpp"

#include <xxhash.h>

#include <array>
#include <bit>
#include <vector>

namespace kvpool {
namespace {

constexpr bool kLittleEndian = std::endian::native == std::endian::little;

// std::byteswap is C++23; these are what it would be for our two widths. (On little-endian
// hosts the u32 one is only named in discarded branches, which clang warns about.)
[[maybe_unused]] constexpr uint32_t to_le(uint32_t v) {
  if constexpr (kLittleEndian) {
    return v;
  } else {
    return ((v & 0x000000ffu) << 24) | ((v & 0x0000ff00u) << 8) | ((v & 0x00ff0000u) >> 8) |
           ((v & 0xff000000u) >> 24);
  }
}

constexpr uint64_t to_le(uint64_t v) {
  if constexpr (kLittleEndian) {
    return v;
  } else {
    return (static_cast<uint64_t>(to_le(static_cast<uint32_t>(v))) << 32) |
           to_le(static_cast<uint32_t>(v >> 32));
  }
}

}  // namespace

BlockHash compute_block_hash(std::span<const Token> tokens, Salt salt) {
  if constexpr (kLittleEndian) {
    // Native layout already is the wire layout: hash the caller's memory in place.
    return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), salt);
  } else {
    std::vector<uint32_t> le(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) le[i] = to_le(tokens[i]);
    return XXH3_64bits_withSeed(le.data(), le.size() * sizeof(uint32_t), salt);
  }
}

SequenceHash compute_sequence_hash(std::optional<SequenceHash> parent, BlockHash block_hash,
                                   Salt salt) {
  if (!parent) return block_hash;
  const std::array<uint64_t, 2> words{to_le(*parent), to_le(block_hash)};
  return XXH3_64bits_withSeed(words.data(), sizeof(words), salt);
}

}  // namespace kvpool
