// Block and sequence hashes, bit-compatible with NVIDIA Dynamo's block manager so a Dynamo
// KV router can consume the hashes kvpool publishes.
//
//   block_hash    = XXH3_64bits_withSeed(tokens as little-endian u32, seed = salt)
//   sequence_hash = block_hash                                        (first block)
//                 = XXH3_64bits_withSeed(LE u64[2]{parent, block_hash}, seed = salt)
//
// The byte order is fixed (little-endian) so that hashes agree across hosts.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace kvpool {

using Token = uint32_t;
using Salt = uint64_t;
using BlockHash = uint64_t;
using SequenceHash = uint64_t;

// Hash of one block's tokens alone (no prefix context).
BlockHash compute_block_hash(std::span<const Token> tokens, Salt salt);

// Hash of a block in the context of its whole prefix: chains the parent's sequence hash.
// Without a parent (first block of a sequence) it is the block hash itself.
SequenceHash compute_sequence_hash(std::optional<SequenceHash> parent, BlockHash block_hash,
                                   Salt salt);

}  // namespace kvpool
