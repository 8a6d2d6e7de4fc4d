// The cells of kvpool_paced_bench's table: operation x gap x placement x backend, each a
// list of latency samples (us).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kvpool::bench {

// The table's columns, in order.
enum BackendId {
  kLibkvpool,
  kRing,
  kSocket,
  kRedis,
  kFutexFloor,
  kEventfdFloor,
  kPipeFloor,
  kCore,
  kBackends
};
inline constexpr const char* kBackendNames[kBackends] = {
    "libkvpool",   "kvpoold-ring",  "unix-socket", "redis",
    "futex-floor", "eventfd-floor", "pipe-floor",  "in-process"};
inline bool is_floor(int backend) {
  return backend == kFutexFloor || backend == kEventfdFloor || backend == kPipeFloor;
}

enum Op { kMatch, kStep, kOps };
inline constexpr const char* kOpNames[kOps] = {"match", "step"};
inline constexpr const char* kOpTitles[kOps] = {
    "match-64 (all hit) + release",
    "engine step: match-64 (all hit) + allocate-16 + register-16 + release of all"};

struct Placement {
  std::string name;
  int client_cpu = -1;  // -1: any allowed CPU
  int server_cpu = -1;
  int clients = 1;
};

// Floors do no pool work: they are measured once per (gap, placement), under the first op.
// The in-process op is measured once per (op, gap), under the first placement.
class Results {
 public:
  Results(size_t gaps, size_t placements)
      : gaps_(gaps), placements_(placements), cells_(kOps * gaps * placements * kBackends) {}
  std::vector<double>& at(int op, int gap, int placement, int backend) {
    return cells_[((static_cast<size_t>(op) * gaps_ + gap) * placements_ + placement) * kBackends +
                  backend];
  }

 private:
  size_t gaps_, placements_;
  std::vector<std::vector<double>> cells_;
};

}  // namespace kvpool::bench
