// kvpool.h: Dynamo-compatible hashing, no daemon needed.
#include "c_api_internal.hpp"
#include "kvpool/core/hash.hpp"

using namespace kvpool;
using namespace kvpool::c_api;

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
  if ((!tokens && count > 0) || !blocks || (capacity > 0 && (!block_hashes || !sequence_hashes)))
    return null_argument(
        "kvpool_hash_tokens: tokens, blocks and (with capacity > 0) both hash arrays must not be "
        "NULL");
  if (page_size == 0)
    return fail(KVPOOL_ERR_INVALID_ARGUMENT, "kvpool_hash_tokens: page_size is 0");
  // Chained directly rather than through TokenBlockSequence: no allocation.
  size_t n = count / page_size;
  std::optional<SequenceHash> parent;
  for (size_t i = 0; i < n && i < capacity; ++i) {
    BlockHash bh =
        compute_block_hash(std::span<const Token>(tokens + i * page_size, page_size), salt);
    SequenceHash sh = compute_sequence_hash(parent, bh, salt);
    block_hashes[i] = bh;
    sequence_hashes[i] = sh;
    parent = sh;
  }
  *blocks = n;
  return KVPOOL_OK;
}

}  // extern "C"
