// A model of the pool with a pluggable eviction policy, independent of PoolCore, to ask
// "would another policy do better on this trace?" before anyone changes the pool core.
// Same request flow and accounting as simulate() (match the cached prefix, allocate the rest
// all or nothing from free + inactive blocks, hold until the end of decode, release the
// request's blocks as one batch, last block first). Policies:
//   lru     evict the inactive block returned longest ago: Dynamo's order with one priority;
//           must agree with simulate() (the PoolCore simulation), which checks this model.
//   s3fifo  S3-FIFO (Yang et al., SOSP'23): a small FIFO (10%) for new blocks, a main FIFO,
//           a ghost FIFO of evicted ids; hits count up to 3, a block leaving the small queue
//           with a hit (or a ghost hit on insert) goes to main, main re-inserts blocks with hits
//           (count - 1). Blocks held by a running request are skipped (re-queued).
#pragma once

#include <string>
#include <vector>

#include "kvpool/core/status.hpp"
#include "simulate.hpp"
#include "trace.hpp"

namespace kvpool::replay {

Result<SimResult> simulate_policy(const std::vector<TraceRequest>& requests,
                                  const SimOptions& options, const std::string& policy);

}  // namespace kvpool::replay
