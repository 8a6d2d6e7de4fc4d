// kvpool-replay --hosts DIR,DIR... (issue 31, "How it is shown"): the slice through several
// hosts' kvpoolds at once, a router sending each request to a random host (routing.hpp).
// With --peer-holders each host's workers match with peer fetch, so a prefix cached on the
// other host is fetched instead of recomputed. The hit rate is shown beside two simulations
// of the pool core: the hosts as separate caches (each over the requests routed to it: what
// kvpool without peer fetch should get), and one shared cache of all the hosts' blocks
// together over every request (what a perfect peer tier could get, with no block held
// twice). Every matched block is checked byte for byte, and every host is checked after the
// run as a single-host replay checks its one (final_checks.hpp).
//
// The hosts are set up outside (tests/peer/replay_two_hosts.sh: network namespaces, one
// kvpoold and kvpool-peer in each); the workers reach each kvpoold and kvpool-peer through
// their runtime dir, as any worker on that host does.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "coordinator.hpp"
#include "trace.hpp"

namespace kvpool::replay {

struct HostsPlan {
  std::string kvpoolctl;
  // Points between the hit rate and the separate caches' simulation (without peer fetch
  // only: the simulation has no model of it); < 0: not checked.
  double max_sim_gap = -1;
};

// Runs the replay on run.host_dirs; the figures go to stdout and `out`. Returns the exit
// code (0: every check held).
int replay_on_hosts(const std::vector<TraceRequest>& requests, const TraceFigures& tf,
                    RunOptions run, const HostsPlan& plan, nlohmann::json& out);

}  // namespace kvpool::replay
