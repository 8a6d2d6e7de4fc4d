// The replay's router across hosts (kvpool-replay --hosts): each request goes to a random
// host, as a router that knows nothing of the caches would send it. The choice is a hash of
// the request's index and the seed, so the coordinator and the simulations agree on it
// without sharing state.
#pragma once

#include <cstdint>

#include "pattern.hpp"

namespace kvpool::replay {

inline uint32_t random_host(uint32_t request_index, uint32_t hosts, uint64_t seed) {
  return static_cast<uint32_t>(splitmix64(splitmix64(seed) ^ request_index) % hosts);
}

}  // namespace kvpool::replay
