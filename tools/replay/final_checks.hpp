// The end of a replay, checked as an operator and a client would see it: the daemon has
// let every worker go (kvpoolctl), and every block it still caches for the trace holds the
// bytes derived from its trace id.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator.hpp"
#include "ctl.hpp"
#include "trace.hpp"

namespace kvpool::replay {

// The final sweep: every block the pool still caches for these requests is matched once,
// as a client would, and checked byte for byte. Returns blocks checked; a wrong one, or a
// failure to look, is added to `violations`.
uint64_t sweep(const std::vector<TraceRequest>& reqs, const RunOptions& o,
               std::vector<std::string>& violations);

// Waits (bounded: 10 s) until the daemon has seen every worker go: no client attached but
// `resident` (clients that stay, e.g. a kvpool-peer beside kvpoold) and nothing active or
// mutable; returns the last status read.
Result<CtlStatus> settle(const CtlTarget& t, const std::string& pool, uint32_t resident = 0);

}  // namespace kvpool::replay
