// Block and sequence hashes, bit-compatible with NVIDIA Dynamo so a Dynamo KV router (or
// any consumer that speaks the same scheme) can match the hashes kvpool publishes.
//
// Every pool names its scheme (config "hash_scheme", PoolInfo::hash_scheme, each event
// batch), so a consumer can refuse one it does not speak:
//
// dynamo-0.2 (HashScheme::kDynamo02, the default): Dynamo 0.2.1's block manager.
//   block_hash    = XXH3_64bits_withSeed(tokens as little-endian u32, seed = salt)
//   sequence_hash = block_hash                                        (first block)
//                 = XXH3_64bits_withSeed(LE u64[2]{parent, block_hash}, seed = salt)
//
// dynamo-router (HashScheme::kDynamoRouter): Dynamo's KV router today
// (kv-router compute_block_hash_for_seq / kv-hashing compute_salt_hash). The salt is the
// block seed, derived from the request's identity by dynamo_router_salt():
//   salt          = 1337 (+ XXH3_64(lora_name, seed 0)) (+ XXH3_64(cache_namespace, seed 1)),
//                   wrapping; empty strings count as absent
//   block_hash    = XXH3_64bits_withSeed(tokens as little-endian u32, seed = salt)
//   sequence_hash = block_hash                                        (first block)
//                 = XXH3_64bits_withSeed(LE u64[2]{parent, block_hash}, seed = 1337)
// The chain seed stays 1337 whatever the salt: LoRA and namespace enter through the blocks.
//
// With salt 1337 (kDynamoSeed) and no LoRA or namespace both schemes give the same hashes,
// which are the ones Dynamo's router computes for a plain request. The byte order is fixed
// (little-endian) so that hashes agree across hosts.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kvpool {

using Token = uint32_t;
using Salt = uint64_t;
using BlockHash = uint64_t;
using SequenceHash = uint64_t;

// The seed Dynamo's router hashes with (XXH3_SEED / CHAIN_XXH3_SEED): the salt a worker
// must use for its blocks to match what the router computes for a plain request.
inline constexpr Salt kDynamoSeed = 1337;

// Values travel in shm (PoolInfo::hash_scheme): never renumber.
enum class HashScheme : uint32_t {
  kDynamo02 = 0,      // "dynamo-0.2"
  kDynamoRouter = 1,  // "dynamo-router"
};
inline constexpr uint32_t kMaxHashScheme = 1;

// "dynamo-0.2" / "dynamo-router"; "unknown" for a value from a newer daemon.
std::string_view hash_scheme_name(HashScheme scheme);
// nullopt for a name this build does not know.
std::optional<HashScheme> parse_hash_scheme(std::string_view name);

// The dynamo-router salt (block seed) of a request's LoRA adapter and cache namespace.
// dynamo_router_salt("", "") == kDynamoSeed.
Salt dynamo_router_salt(std::string_view cache_namespace, std::string_view lora_name);

// Hash of one block's tokens alone (no prefix context). The same in both schemes.
BlockHash compute_block_hash(std::span<const Token> tokens, Salt salt);

// Hash of a block in the context of its whole prefix: chains the parent's sequence hash.
// Without a parent (first block of a sequence) it is the block hash itself.
SequenceHash compute_sequence_hash(std::optional<SequenceHash> parent, BlockHash block_hash,
                                   Salt salt, HashScheme scheme = HashScheme::kDynamo02);

}  // namespace kvpool
