// CPU time of processes, from /proc, for kvpool_paced_bench's idle figure.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "bench_backends.hpp"

namespace kvpool::bench {

// The thread ids of `pid` (/proc/<pid>/task); empty when it is gone.
std::vector<pid_t> list_tasks(pid_t pid);
// utime + stime of every thread of `pid`, in clock ticks (/proc/<pid>/stat fields 14, 15).
uint64_t cpu_ticks(pid_t pid);

struct IdleCpu {
  double daemon_percent = 0;  // of one core
  double client_percent = 0;
  double tick_ms = 0;  // the resolution: one clock tick
};

// Forks a client (the calling process must have no other thread) that attaches to `server`
// through libkvpool and stays quiet; after a second for the attach to settle, measures
// kvpoold's and that client's CPU over `seconds`. The client detaches afterwards.
IdleCpu measure_idle_cpu(const KvpooldServer& server, double seconds);

}  // namespace kvpool::bench
