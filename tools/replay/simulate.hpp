// The replay's yardstick: the same requests, in the same order, against the pool core
// in this process (same capacity, same eviction policy), on a virtual clock. A request
// arriving at t matches its longest cached prefix, allocates the rest (all or nothing; if the
// pool cannot give them it is served uncached, as the workers do), registers them and holds
// every block until t + output_length x token_ms, when it releases them as one batch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kvpool/core/status.hpp"
#include "trace.hpp"

namespace kvpool::replay {

struct SimOptions {
  uint32_t capacity = 0;        // blocks in the pool
  double token_ms = 10;         // decode time per output token, trace time
  uint32_t shallow_levels = 0;  // block priorities: see block_priority()
};

// The priority a worker gives the block at position k of a prompt (0 = first). Dynamo's
// order evicts the lowest priority first, then the least recently returned. With L > 0 the
// first L blocks of every prompt get priorities L..1 (shallow prefixes kept, leaves evicted
// first); L = 0 is Dynamo's default (all 0). Measured worse on the conversation trace at every
// capacity below 40% (docs/replay.md): an experiment, not a recommendation.
inline uint32_t block_priority(size_t k, uint32_t shallow_levels) {
  return k < shallow_levels ? shallow_levels - static_cast<uint32_t>(k) : 0;
}

struct SimResult {
  uint64_t prompt_blocks = 0;
  uint64_t matched_blocks = 0;
  uint64_t uncached_requests = 0;  // the pool could not give their new blocks
  uint64_t evictions = 0;
  double hit_rate() const {
    return prompt_blocks ? double(matched_blocks) / double(prompt_blocks) : 0;
  }
};

// How a worker's release of a request's blocks reaches the pool core: the worker drops them
// in prompt order, libkvpool queues the releases and sends them in batches of 64
// (kReleaseBatch, libclient/src/connection.cpp), and the pool core takes each batch last
// first (PoolCore::release_immutable), so a batch's last block becomes the first to evict.
// Every model releases through this, so that long prompts (over 64 blocks: 828 requests of
// the conversation trace) enter the eviction order as they do in kvpoold.
inline constexpr size_t kClientReleaseBatch = 64;
template <typename T, typename Release>
void release_in_client_batches(std::span<const T> blocks, const Release& release) {
  for (size_t at = 0; at < blocks.size(); at += kClientReleaseBatch)
    release(blocks.subspan(at, std::min(kClientReleaseBatch, blocks.size() - at)));
}

// The sequence hash the simulation uses for a trace block id (ids already name chains).
inline uint64_t sim_hash(uint64_t id) { return id * 0x9E3779B97F4A7C15ull + 1; }

Result<SimResult> simulate(const std::vector<TraceRequest>& requests, const SimOptions& options);

}  // namespace kvpool::replay
