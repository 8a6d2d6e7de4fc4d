// kvpool-replay --cold-restart-at F (issue 28, "How it is shown"): the first F of the slice
// through the private kvpoold with a disk tier; then, once every worker is gone and every
// write-behind has finished, kvpoold is killed with SIGKILL and started again over the same
// configuration and slot file, with no descriptor store (its host pool comes back empty,
// its disk index is rebuilt from the file); then the rest of the slice. Hit rates per
// phase and per tier (host, disk, total) beside the two-tier model of the same thing
// (tier_sim.hpp, simulate_tiers_cold_restart) and the ceiling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "coordinator.hpp"
#include "ctl.hpp"
#include "private_daemon.hpp"
#include "trace.hpp"

namespace kvpool::replay {

struct ColdRestartPlan {
  size_t restart_at = 0;  // requests[0, restart_at) before the restart
  uint32_t capacity = 0;  // host blocks
  uint64_t disk_slots = 0;
  double max_sim_gap = -1;  // points, per phase and overall; < 0: not checked
};

// Runs both phases; the figures go to stdout and `out`. Returns the exit code (0: every
// check held).
int replay_with_cold_restart(const std::vector<TraceRequest>& requests, const ColdRestartPlan& plan,
                             RunOptions run, const CtlTarget& ctl, PrivateDaemon& daemon,
                             nlohmann::json& out);

}  // namespace kvpool::replay
