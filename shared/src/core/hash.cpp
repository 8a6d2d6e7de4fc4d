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
                                   Salt salt, HashScheme scheme) {
  if (!parent) return block_hash;
  const std::array<uint64_t, 2> words{to_le(*parent), to_le(block_hash)};
  // dynamo-router chains with its fixed seed; the salt only seeds the blocks.
  const Salt chain_seed = scheme == HashScheme::kDynamoRouter ? kDynamoSeed : salt;
  return XXH3_64bits_withSeed(words.data(), sizeof(words), chain_seed);
}

std::string_view hash_scheme_name(HashScheme scheme) {
  switch (scheme) {
    case HashScheme::kDynamo02:
      return "dynamo-0.2";
    case HashScheme::kDynamoRouter:
      return "dynamo-router";
  }
  return "unknown";
}

std::optional<HashScheme> parse_hash_scheme(std::string_view name) {
  if (name == "dynamo-0.2") return HashScheme::kDynamo02;
  if (name == "dynamo-router") return HashScheme::kDynamoRouter;
  return std::nullopt;
}

Salt dynamo_router_salt(std::string_view cache_namespace, std::string_view lora_name) {
  // Dynamo's kv-hashing compute_salt_hash: LoRA with inner seed 0, namespace with inner seed
  // 1 (so a namespace never collides with a LoRA of the same bytes), added with wrap-around.
  Salt seed = kDynamoSeed;
  if (!lora_name.empty()) seed += XXH3_64bits_withSeed(lora_name.data(), lora_name.size(), 0);
  if (!cache_namespace.empty())
    seed += XXH3_64bits_withSeed(cache_namespace.data(), cache_namespace.size(), 1);
  return seed;
}

}  // namespace kvpool
