// What the event formats need to know about a daemon's pools, read from its PoolInfo table
// when kvpool-events attaches: where the blocks live (vLLM "medium", Dynamo "storage_tier"),
// whether a disk tier backs the pool, the page size (vLLM "block_size") and how they are
// hashed (every batch's "hash_scheme").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvpool/core/hash.hpp"

namespace kvpool::events {

struct PoolMeta {
  std::string name;
  bool device = false;  // storage "cuda": GPU memory
  uint32_t page_size = 0;
  HashScheme hash_scheme = HashScheme::kDynamo02;
  bool disk = false;  // a host pool with a disk tier (its events: Dynamo "disk", vLLM "DISK")
};

// The meta of pool `i`, or a host pool of scheme dynamo-0.2 for an index the table lacks
// (a record from a pool the daemon did not describe: nothing better to say about it).
const PoolMeta& pool_meta(const std::vector<PoolMeta>& pools, uint32_t i);

}  // namespace kvpool::events
