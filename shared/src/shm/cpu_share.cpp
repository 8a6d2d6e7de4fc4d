#include "kvpool/shm/cpu_share.hpp"

#include <sched.h>

#include <cstddef>

#include "kvpool/shm/segment_layout.hpp"

namespace kvpool::shm {

// The gauges took reserved bytes of ControlStats: where docs/shm-format.md says they are.
static_assert(offsetof(ControlStats, engine_cpus) == 88);
static_assert(offsetof(ControlStats, clients_busy) == 96);
static_assert(offsetof(ControlStats, clients_awake) == 104);

uint32_t allowed_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? static_cast<uint32_t>(n) : 1u;
}

}  // namespace kvpool::shm
