// Whether a caller that waits for kvpoold's answer should poll for it or sleep at once, from
// what the engine publishes about the cores (ControlStats::engine_cpus, clients_busy,
// clients_awake; docs/performance.md, "Many clients, few cores").
//
// Polling pays only while a core is free for it. kvpoold's engine needs one core, and every
// client that is awake needs one: to poll, or to read its answer and send the next request.
// With more of them than cores, a caller that polls holds a core the engine or a woken
// client needs (on the 2-core development VM the engine was preempted on about half of all
// calls once two or more clients called flat out), so it sleeps on its doorbell at once and
// the engine's futex wake hands it the answer.
//
// The clients that count are the awake ones, not every client in a call: a client asleep
// on its doorbell holds no core. Counting every busy client made two flat-out clients on
// two cores both sleep on every call (0.40x of one client's rate on an idle 2-core VM);
// counting the awake ones lets one of them poll while the other sleeps (0.75x; figures in
// docs/performance.md).
#pragma once

#include <cstdint>

#include "kvpool/shm/futex.hpp"

namespace kvpool::shm {

// How long after the engine last took a request from a client it still counts that client
// as busy: about the gap between two calls of a client calling flat out on a crowded host,
// and far below the gaps of an engine's cadence (milliseconds).
inline constexpr uint64_t kBusyWindowNs = 200'000;

// Set in ControlStats::clients_awake by a daemon that publishes it; the count is below it.
inline constexpr uint64_t kAwakePublished = uint64_t{1} << 63;

// The clients that compete for the engine's cores: the awake ones when the daemon publishes
// them, else (an older daemon) every client in a call.
inline constexpr uint64_t clients_competing(uint64_t clients_busy, uint64_t clients_awake) {
  return (clients_awake & kAwakePublished) != 0 ? clients_awake & ~kAwakePublished : clients_busy;
}

// True when a caller may poll: the engine and the competing clients (which include the
// caller once the engine has seen its request) fit the engine's CPUs. engine_cpus 0 is a
// daemon that does not publish them: poll, as callers always did.
inline constexpr bool polling_pays(uint64_t clients_competing, uint64_t engine_cpus) {
  return engine_cpus == 0 || clients_competing + 1 <= engine_cpus;
}

// Whether the client kvpoold has just answered waits for kvpoold's own core, so that the
// engine must park at once rather than poll on for the next request. CPU tags are
// cpu_tag()'s; 0 and kUnknownCpuTag name no core, so they never match. `woke`: the tag its
// response doorbell held when the answer rang it (it slept there). `requested_from`: its
// request ring's producer_cpu, where it last published (it has not slept: our wake-up by
// its ring preempted it there, and it waits for the core, runnable). `here`: the engine's.
// A stale tag (the client moved since) costs one park the next request must ring for.
inline constexpr bool answered_on_our_core(uint32_t woke, uint32_t requested_from, uint32_t here) {
  return here != 0 && here != kUnknownCpuTag && (woke == here || requested_from == here);
}

// The CPUs the calling thread may run on (sched_getaffinity), at least 1.
uint32_t allowed_cpu_count();

}  // namespace kvpool::shm
