// One replay worker process (kvpool-replay --worker ...): an inference engine stand-in that
// serves its share of the trace through libkvpool. It reads its requests from a file, tells
// the coordinator READY on stdout once attached, waits for "GO <start ns>" on stdin (unless
// --start-ns was given: a replacement for a killed worker), and serves each request at
// start + timestamp / speed:
//   match the prompt's sequence hashes -> check every byte of every matched block ->
//   allocate the rest (all or nothing; NotEnoughBlocks: served uncached) -> fill each from its
//   trace id -> register -> hold everything for output_length x token_ms / speed -> release.
// Per request it writes one line to stdout (one write(), shorter than PIPE_BUF, so lines of a
// worker killed mid-run are whole):
//   D <index> <blocks> <matched> <verified_bytes> <corrupt> <cached> <late_us> <match_ns>
//   <alloc_ns> <register_ns> R <release_ns>
// Exit codes: 0 done, 1 a corrupt block was seen, 2 cannot attach or bad input, 3 daemon gone.
#pragma once

#include <cstdint>
#include <string>

namespace kvpool::replay {

struct WorkerOptions {
  std::string instance = "default";
  std::string runtime_dir;
  std::string pool;
  std::string assign_file;  // lines: index timestamp_ms output_length n id_1 .. id_n
  int64_t start_ns = -1;    // CLOCK_MONOTONIC; -1: read "GO <ns>" from stdin
  double speed = 1;
  double token_ms = 10;
  uint32_t shallow_levels = 0;
  bool onboard = false;  // match with MatchOptions::onboard: continue the prefix from disk
  // Non-empty: match with peer fetch (PeerFetchOptions), asking this host's kvpool-peer to
  // fetch the rest of the prefix from the kvpool-peer at this address.
  std::string peer_holder;
  uint32_t peer_deadline_ms = 1000;
  int64_t corrupt_id = -1;  // test hook: flip a byte of the block filled for this trace id  //
                            // block priorities, see block_priority() in simulate.hpp
};

int run_worker(const WorkerOptions& options);

}  // namespace kvpool::replay
