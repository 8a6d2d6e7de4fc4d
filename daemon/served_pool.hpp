// One pool as kvpoold serves it: its configuration, the memory its blocks live in, and the
// pool core (in the control segment) that says who holds which block.
#pragma once

#include "daemon/config.hpp"
#include "daemon/pool_storage.hpp"
#include "kvpool/pool/pool_core.hpp"

namespace kvpool::daemon {

struct ServedPool {
  PoolConfig config;
  PoolStorage storage;  // the block bytes: host shm or a CUDA slab
  pool::PoolCore core;
};

}  // namespace kvpool::daemon
