// CPUs for kvpool_paced_bench: where processes run (affinity) and what they burn (CPU time).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "bench_backends.hpp"

namespace kvpool::bench {

// Records the CPUs this process may use, before anything is pinned; cpu -1 below means
// "any of them". Forked processes inherit the record.
void remember_allowed_cpus();
std::vector<int> allowed_cpus();
// Every thread of `pid` (/proc/<pid>/task) onto `cpu`. Threads it starts later are not
// covered, so call it again before each measurement.
void pin_process(pid_t pid, int cpu);
void pin_this_thread(int cpu);

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
