// kvpool.h: Dynamo-compatible hashing, in either scheme or as a pool hashes.
#include <optional>
#include <string>

#include "c_api_internal.hpp"
#include "kvpool/core/hash.hpp"

using namespace kvpool;
using namespace kvpool::c_api;

namespace {

// The full blocks of tokens, chained directly rather than through TokenBlockSequence (no
// allocation), in `scheme`.
kvpool_error_code hash_tokens_in(const char* fn, HashScheme scheme, const uint32_t* tokens,
                                 size_t count, uint32_t page_size, uint64_t salt,
                                 uint64_t* block_hashes, uint64_t* sequence_hashes, size_t capacity,
                                 size_t* blocks) {
  if ((!tokens && count > 0) || !blocks || (capacity > 0 && (!block_hashes || !sequence_hashes)))
    return null_argument((std::string(fn) +
                          ": tokens, blocks and (with capacity > 0) both hash arrays must not be "
                          "NULL")
                             .c_str());
  if (page_size == 0)
    return fail(KVPOOL_ERR_INVALID_ARGUMENT, (std::string(fn) + ": page_size is 0").c_str());
  size_t n = count / page_size;
  std::optional<SequenceHash> parent;
  for (size_t i = 0; i < n && i < capacity; ++i) {
    BlockHash bh =
        compute_block_hash(std::span<const Token>(tokens + i * page_size, page_size), salt);
    SequenceHash sh = compute_sequence_hash(parent, bh, salt, scheme);
    block_hashes[i] = bh;
    sequence_hashes[i] = sh;
    parent = sh;
  }
  *blocks = n;
  return KVPOOL_OK;
}

}  // namespace

extern "C" {

uint64_t kvpool_block_hash(const uint32_t* tokens, size_t count, uint64_t salt) {
  if (!tokens) count = 0;
  return compute_block_hash(std::span<const Token>(tokens, count), salt);
}

uint64_t kvpool_sequence_hash(int has_parent, uint64_t parent, uint64_t block_hash, uint64_t salt) {
  return compute_sequence_hash(has_parent ? std::optional<SequenceHash>(parent) : std::nullopt,
                               block_hash, salt);
}

kvpool_error_code kvpool_hash_tokens(const uint32_t* tokens, size_t count, uint32_t page_size,
                                     uint64_t salt, uint64_t* block_hashes,
                                     uint64_t* sequence_hashes, size_t capacity, size_t* blocks) {
  return hash_tokens_in("kvpool_hash_tokens", HashScheme::kDynamo02, tokens, count, page_size, salt,
                        block_hashes, sequence_hashes, capacity, blocks);
}

kvpool_error_code kvpool_hash_tokens_scheme(kvpool_hash_scheme scheme, const uint32_t* tokens,
                                            size_t count, uint32_t page_size, uint64_t salt,
                                            uint64_t* block_hashes, uint64_t* sequence_hashes,
                                            size_t capacity, size_t* blocks) {
  if (static_cast<uint32_t>(scheme) > kMaxHashScheme)
    return fail(KVPOOL_ERR_INVALID_ARGUMENT, ("kvpool_hash_tokens_scheme: unknown hash scheme " +
                                              std::to_string(static_cast<uint32_t>(scheme)))
                                                 .c_str());
  return hash_tokens_in("kvpool_hash_tokens_scheme", static_cast<HashScheme>(scheme), tokens, count,
                        page_size, salt, block_hashes, sequence_hashes, capacity, blocks);
}

kvpool_hash_scheme kvpool_pool_hash_scheme(const kvpool_pool* pool) {
  return pool ? static_cast<kvpool_hash_scheme>(pool->pool.hash_scheme()) : KVPOOL_HASH_DYNAMO_0_2;
}

kvpool_error_code kvpool_pool_hash_tokens(const kvpool_pool* pool, const uint32_t* tokens,
                                          size_t count, uint64_t salt, uint64_t* block_hashes,
                                          uint64_t* sequence_hashes, size_t capacity,
                                          size_t* blocks) {
  if (!pool) return null_argument("kvpool_pool_hash_tokens: pool must not be NULL");
  return hash_tokens_in("kvpool_pool_hash_tokens", pool->pool.hash_scheme(), tokens, count,
                        pool->pool.page_size(), salt, block_hashes, sequence_hashes, capacity,
                        blocks);
}

}  // extern "C"
