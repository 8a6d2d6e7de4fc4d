// Whether a caller that waits for kvpoold's answer should poll for it or sleep at once, from
// what the engine publishes about the cores (ControlStats::engine_cpus, clients_busy;
// docs/performance.md, "Many clients, few cores").
//
// Polling pays only while a core is free for it. kvpoold's engine needs one core, and every
// client in a call needs one to read its answer and send the next request. With more of
// them than cores, a caller that polls holds a core the engine or a woken client needs (on
// the 2-core development VM the engine was preempted on about half of all calls once two or
// more clients called flat out), so it sleeps on its doorbell at once and the engine's
// futex wake hands it the answer.
#pragma once

#include <cstdint>

namespace kvpool::shm {

// How long after the engine last took a request from a client it still counts that client
// as busy: about the gap between two calls of a client calling flat out on a crowded host,
// and far below the gaps of an engine's cadence (milliseconds).
inline constexpr uint64_t kBusyWindowNs = 200'000;

// True when a caller may poll: the engine and the busy clients (which include the caller
// once the engine has seen its request) fit the engine's CPUs. engine_cpus 0 is a daemon that
// does not publish them: poll, as callers always did.
inline constexpr bool polling_pays(uint64_t clients_busy, uint64_t engine_cpus) {
  return engine_cpus == 0 || clients_busy + 1 <= engine_cpus;
}

// The CPUs the calling thread may run on (sched_getaffinity), at least 1.
uint32_t allowed_cpu_count();

}  // namespace kvpool::shm
