// A model of the pool, independent of PoolCore, with an optional disk tier below it (issue
// 28 item 10), on the replay's virtual clock and request flow (simulate.hpp), step for step
// what kvpoold does. Without a disk and with policy lru it must agree with simulate() (the
// PoolCore simulation), which checks this model; other policies ask "would another policy do
// better on this trace?" before anyone changes the pool core.
// - host memory (one priority; releases in the client's batches, simulate.hpp) evicts in the
//   policy's order:
//     lru     the inactive block returned longest ago: Dynamo's order with one priority;
//     s3fifo  S3-FIFO (Yang et al., SOSP'23): a small FIFO (10%) for new blocks, a main FIFO,
//             a ghost FIFO of evicted ids; hits count up to 3, a block leaving the small queue
//             with a hit (or a ghost hit on insert) goes to main, main re-inserts blocks with
//             hits (count - 1). Blocks held by a running request are skipped (re-queued);
// - the disk tier (daemon/disk/) is an LRU over its slots (disk_index.hpp), written behind:
//   every block newly registered in host memory is written to disk at once (admit "all"; the
//   model assumes the write queue keeps up: kvpoold counts what it drops,
//   kvpool_disk_write_queue_drops_total), and a slot is touched when written or read;
// - a match (with onboard, daemon/engine_onboard.cpp) takes its longest host prefix; where
//   that ends and the disk holds the next block, kvpoold reads the disk run into newly
//   allocated host blocks, as many as free + inactive host blocks allow, registers them, and
//   matches host memory again from there (so host blocks after the disk run count too);
//   the worker then allocates the rest all or nothing (else the request is served uncached,
//   its hits still counted).
// Host hits (both host matches) and disk hits (blocks onboarded) are counted apart.
//
// A cold restart (kvpoold killed, started without its descriptors) empties host memory and
// keeps the disk, whose order a start rebuilds from the slots' write sequence
// (DiskIndex::load): reads before the restart no longer count as uses.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvpool/core/status.hpp"
#include "simulate.hpp"
#include "trace.hpp"

namespace kvpool::replay {

struct TierSimResult {
  uint64_t prompt_blocks = 0;
  uint64_t host_hits = 0;
  uint64_t disk_hits = 0;  // onboarded from disk
  uint64_t uncached_requests = 0;
  uint64_t host_evictions = 0, disk_evictions = 0, disk_writes = 0;
  double host_hit_rate() const { return prompt_blocks ? double(host_hits) / prompt_blocks : 0; }
  double disk_hit_rate() const { return prompt_blocks ? double(disk_hits) / prompt_blocks : 0; }
  double hit_rate() const { return host_hit_rate() + disk_hit_rate(); }
};

enum class HostPolicy { kLru, kS3Fifo };
Result<HostPolicy> parse_host_policy(const std::string& name);  // "lru" or "s3fifo"

// `options.capacity` host blocks over `disk_blocks` disk slots (0: no disk tier).
Result<TierSimResult> simulate_tiers(const std::vector<TraceRequest>& requests,
                                     const SimOptions& options, uint64_t disk_blocks,
                                     HostPolicy policy = HostPolicy::kLru);

// The host-only model with policy "lru" or "s3fifo", in simulate()'s figures
// (kvpool-replay --simulate-only ... --policy P).
Result<SimResult> simulate_policy(const std::vector<TraceRequest>& requests,
                                  const SimOptions& options, const std::string& policy);

// The same with a cold restart of kvpoold once requests[0, cold_restart_at) are served and
// every block they held is released: [0] the figures before it, [1] after it.
Result<std::array<TierSimResult, 2>> simulate_tiers_cold_restart(
    const std::vector<TraceRequest>& requests, const SimOptions& options, uint64_t disk_blocks,
    size_t cold_restart_at);

}  // namespace kvpool::replay
