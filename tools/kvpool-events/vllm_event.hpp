// vLLM's KV event format (vllm/distributed/kv_events.py), which vLLM and SGLang publish, the
// llm-d KV-cache indexer consumes and Dynamo's KvEventPublisher relays from a ZMQ endpoint:
//
//   KVEventBatch{ts: float, events: [...], data_parallel_rank: int}
//   BlockStored{block_hashes: [int], parent_block_hash: int|None, token_ids: [int],
//               block_size: int, lora_id: int|None, medium: str|None, lora_name: str|None}
//   BlockRemoved{block_hashes: [int], medium: str|None}
//   AllBlocksCleared{}
//
// msgpack as msgspec encodes those Structs: the events are tagged unions (tag field "type",
// value the class name). Today's vLLM encodes every Struct as a map (kMap, field names as
// keys, tag first); vLLM before the change used array_like Structs (kArray: positional, the
// tag as the first element). Fields with a default (extra_keys, group_idx, ...) are omitted,
// as omit_defaults does; fields without one are always there, None as nil. Hashes are the
// sequence hashes as signed 64-bit integers, as Dynamo's Python publisher sends them; a
// keyed block's hash may instead be its key as msgpack bin (VllmBlockHashes::kKey): vLLM's
// ExternalBlockHash is `bytes | int` (vllm/v1/core/kv_cache_utils.py, commit 001cabc1be16;
// BlockStored.block_hashes / parent_block_hash and BlockRemoved.block_hashes in
// vllm/distributed/kv_events.py, commit 0181ea3173e5), and vLLM sends its sha256 block
// hashes as bytes when VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 (its default, 1, sends ints).
//
// kvpool adds one field to the batch, "hash_scheme" (core/hash.hpp), which msgspec decoders
// skip as an unknown field (in the array form: one trailing element); every event of a
// batch comes from pools of that one scheme.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvpool/core/hash.hpp"

namespace kvpool::events {

enum class VllmEncoding { kMap, kArray };

// What a keyed block (BatchStore) is called in block_hashes: its 64-bit index hash as every
// other block (kIndex, the default: Dynamo's ZMQ relay decodes block hashes as i64 | u64
// and drops a batch with bytes, lib/kv-router/src/zmq_wire.rs BlockHashValue, commit
// 55d70854a9dd), or its namespaced key as bin (kKey).
enum class VllmBlockHashes { kIndex, kKey };

// vLLM's medium names: "GPU" (MEDIUM_GPU) for device pools, "CPU" for host pools (as vLLM's
// CPU offloading names its tier), "DISK" for a host pool's disk tier (medium is a free
// string in vLLM; consumers compare it by name).
inline constexpr std::string_view kMediumGpu = "GPU";
inline constexpr std::string_view kMediumCpu = "CPU";
inline constexpr std::string_view kMediumDisk = "DISK";

struct VllmEvent {
  enum class Kind { kStored, kRemoved, kCleared };
  Kind kind = Kind::kCleared;
  std::vector<int64_t> block_hashes;         // kStored, kRemoved
  std::optional<int64_t> parent_block_hash;  // kStored
  // Keyed blocks sent by key (VllmBlockHashes::kKey): block_keys[i], when there and not
  // empty, goes out as bin in place of block_hashes[i]; parent_key likewise for the parent.
  std::vector<std::string> block_keys;
  std::string parent_key;
  // kStored: every block's token ids, block after block (block_size * block_hashes.size()),
  // when the registering client sent them (RegisterOptions::send_tokens); else empty, and
  // always empty in a resync (the registry keeps no tokens).
  std::vector<uint32_t> token_ids;
  uint32_t block_size = 0;  // kStored
  std::string_view medium;  // kStored, kRemoved
};

// Encodes one KVEventBatch into `out` (replacing its contents).
void encode_vllm_batch(std::string& out, VllmEncoding encoding, double ts,
                       std::span<const VllmEvent> events, int64_t data_parallel_rank,
                       HashScheme scheme);

// A hash as vLLM-format consumers receive it: the same 64 bits, read as signed.
inline int64_t signed_hash(uint64_t h) { return static_cast<int64_t>(h); }

}  // namespace kvpool::events
