// The replay's coordinator: splits the requests across N worker processes (round robin, or
// by the first block id so that requests sharing a system prompt meet on one worker), starts
// them together, collects one line per served request, and with kill_interval_s > 0 kills a
// worker with SIGKILL every so often and starts a replacement that serves what the victim
// had not (its in-flight blocks are reclaimed by kvpoold).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvpool/core/status.hpp"
#include "trace.hpp"

namespace kvpool::replay {

struct RunOptions {
  std::string self;  // this program, exec'd with --worker
  std::string instance, runtime_dir, pool;
  int workers = 4;
  bool route_by_first_block = false;
  double speed = 1;
  double token_ms = 10;
  uint32_t shallow_levels = 0;
  int64_t corrupt_id = -1;  // test hook, passed to the workers (--inject-corrupt-id)  // see
                            // block_priority() in simulate.hpp
  double kill_interval_s = 0;
  int max_kills = -1;  // -1: no limit
  uint64_t seed = 1;
  bool onboard = false;     // workers match with MatchOptions::onboard (a pool with a disk tier)
  std::string scratch_dir;  // where the per-worker request files go
  // --hosts: one runtime dir per host, each a kvpoold with `instance` and `pool`. Worker w
  // serves host w % hosts; each request goes to a random host (routing.hpp), then round
  // robin among that host's workers. Empty: one host (`runtime_dir`).
  std::vector<std::string> host_dirs;
  // --peer-holders: each host's kvpool-peer address, in the order of host_dirs. Workers then
  // match with peer fetch (PeerFetchOptions), naming the next host's kvpool-peer as the
  // holder (with two hosts: the other one). Empty: local matches only.
  std::vector<std::string> peer_holders;
  uint32_t peer_deadline_ms = 1000;
};

struct RunResult {
  uint64_t requests = 0, prompt_blocks = 0, matched_blocks = 0, verified_bytes = 0;
  uint64_t verified_blocks = 0, corrupt_blocks = 0, uncached_requests = 0;
  uint64_t kills = 0, replacements = 0;
  // Of matched_blocks, those the workers' matches onboarded from the disk tier (issue 28
  // item 6); `onboarded`: the workers asked for it.
  uint64_t disk_matched_blocks = 0;
  bool onboarded = false;
  double wall_s = 0;       // from start to the last worker's exit
  double late_p99_ms = 0;  // how far behind the trace's clock requests were started
  std::vector<double> match_us, allocate_us, register_us, release_us;
  std::vector<std::string> violations;
};

RunResult run_replay(const std::vector<TraceRequest>& requests, const RunOptions& options);

// run_replay in a fresh scratch directory (options.scratch_dir), removed after.
Result<RunResult> run_replay_in_scratch(const std::vector<TraceRequest>& requests,
                                        RunOptions options);

}  // namespace kvpool::replay
