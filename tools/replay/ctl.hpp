// What the replay asks kvpoolctl (an operator's view, not the replay's own bookkeeping):
// pool counts and reclaims from `kvpoolctl status --json`, invariants from `kvpoolctl check`.
#pragma once

#include <cstdint>
#include <string>

#include "kvpool/core/status.hpp"

namespace kvpool::replay {

struct CtlTarget {
  std::string kvpoolctl;  // path of the binary
  std::string instance;
  std::string runtime_dir;
};

struct CtlStatus {
  uint32_t clients = 0;
  uint64_t reclaimed_clients = 0, reclaimed_blocks = 0;
  uint32_t total = 0, free = 0, mutable_blocks = 0, active = 0, inactive = 0;
  uint64_t evictions = 0;
  // The pool's disk tier (0 slots: none).
  uint64_t disk_slots = 0, disk_slots_used = 0, disk_blocks_written = 0;
  uint64_t disk_blocks_onboarded = 0, disk_write_queue_drops = 0;
  uint64_t disk_write_skipped = 0, disk_evictions = 0;
  std::string disk_path;
};

// The host's kvpool-peer (`kvpoolctl peers --json`), summed over the peers it fetched from.
struct CtlPeerFigures {
  uint64_t fetches = 0, blocks_fetched = 0, failures = 0;
};

// `kvpoolctl status --json`, the figures of pool `pool` (the first pool when empty).
Result<CtlStatus> ctl_status(const CtlTarget& t, const std::string& pool);
// The name of the daemon's first pool.
Result<std::string> ctl_first_pool(const CtlTarget& t);
// `kvpoolctl peers --json`: what this host's kvpool-peer fetched.
Result<CtlPeerFigures> ctl_peers(const CtlTarget& t);
// `kvpoolctl check`: ok, or the violation it names.
Status ctl_check(const CtlTarget& t);

}  // namespace kvpool::replay
