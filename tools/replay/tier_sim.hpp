// The two-tier model of a pool with a disk tier (issue 28 item 10), on the replay's virtual
// clock and request flow (simulate.hpp): host memory evicts in Dynamo's order with one
// priority (the inactive block returned longest ago, as policy_sim's lru); the disk tier
// (daemon/disk/) is an LRU over its slots, written behind: every block newly registered in
// host memory is written to disk at once (admit "all"; the model assumes the write queue
// keeps up: kvpoold counts what it drops, kvpool_disk_write_queue_drops_total), and a slot
// is touched when written or read. A request matches its longest host prefix, continues it
// on disk as far as the disk holds it (onboard: those blocks are allocated in host memory,
// all or nothing with the rest of the prompt, and registered there), then allocates the rest.
// Host hits and disk hits are counted apart; their sum is the hit rate.
#pragma once

#include <cstdint>
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

// `options.capacity` host blocks over `disk_blocks` disk slots (0: no disk tier, then the
// host figures equal policy_sim's lru).
Result<TierSimResult> simulate_tiers(const std::vector<TraceRequest>& requests,
                                     const SimOptions& options, uint64_t disk_blocks);

}  // namespace kvpool::replay
