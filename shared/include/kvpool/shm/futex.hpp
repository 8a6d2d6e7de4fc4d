// Futexes on 32-bit words in shared memory, and the doorbell protocol built on them
// (DESIGN §4): the waiter spins briefly, then sleeps on the futex; the waker pays for a
// system call only when the waiter says it sleeps.
//
// No process-shared condition variables: with glibc >= 2.25 a waiter killed at the wrong
// moment can hang the signaller, and kvpool's peers are processes that may die anywhere.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace kvpool::shm {

// Sleeps while *word == expected, at most `timeout` (relative, CLOCK_MONOTONIC; a negative
// timeout counts as zero). Shared (not FUTEX_PRIVATE) so that it pairs with wakes from
// other processes mapping the same memory at other addresses.
// Returns 0 when woken (possibly spuriously), EAGAIN when *word != expected on entry,
// ETIMEDOUT, EINTR, or another errno for a bad address.
int futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);

// Wakes every thread sleeping on `word`, in any process.
void futex_wake_all(std::atomic<uint32_t>* word);

// One waiter's doorbell, in shared memory. Exactly one thread waits on a given doorbell;
// any number may ring it.
//
// Lost wake-ups are avoided by two rules:
//  - `sleeping` is written only by the waiter. If a waker cleared it, a waiter that set it
//    again between the waker's load and store would sleep with the flag cleared, the next
//    ring would skip the wake, and both sides would hang.
//  - Both sides run the Dekker pattern with seq_cst fences: the waker publishes, fences,
//    then reads `sleeping`; the waiter sets `sleeping`, fences, then checks its condition.
//    At least one of them sees the other's store, so either the waiter sees the data or
//    the waker sees the flag. The futex then compares `seq` against the value read before
//    the flag was set, so a wake that lands before the waiter reaches the kernel turns
//    into EAGAIN instead of being lost.
struct Doorbell {
  std::atomic<uint32_t> seq;       // bumped by wakers; the futex word
  std::atomic<uint32_t> sleeping;  // 1 while the waiter may be in futex_wait
};
static_assert(std::is_standard_layout_v<Doorbell>);
static_assert(sizeof(Doorbell) == 8);
static_assert(offsetof(Doorbell, seq) == 0 && offsetof(Doorbell, sleeping) == 4);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex needs a plain u32");

// One pause: tells the core it is spinning (frees the sibling hyper-thread, saves power).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Gives the core to another runnable thread on it, if any (sched_yield). On an idle core
// it returns at once (~0.3 us): polling with it costs little more than spinning, and never
// keeps a peer that shares the core waiting for our time slice to end.
void yield_core();

// Waker side. Call after publishing the data the waiter waits for (with a release store).
inline void ring(Doorbell& bell) {
  // Orders the caller's publishing store before the load of `sleeping` (store-load: only a
  // seq_cst fence does this). Pairs with the fence in wait().
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (bell.sleeping.load(std::memory_order_relaxed) != 0) {
    // release pairs with the waiter's acquire load of seq: a waiter that already sees this
    // increment also sees the data published before it.
    bell.seq.fetch_add(1, std::memory_order_release);
    futex_wake_all(&bell.seq);
  }
}

enum class WaitResult {
  kReady,     // ready() returned true
  kTimedOut,  // futex_timeout passed and ready() is still false
};

// How long a waiter polls before it sleeps, and how (DESIGN §4). Polling is bounded in
// time, not in passes: a pass costs 40 ns on an idle core and a whole time slice on a
// shared one. Between polls the waiter yields the core, so a peer that shares it (the
// daemon, or the client it woke) runs at once instead of after our slice.
struct PollPolicy {
  std::chrono::nanoseconds budget{0};  // 0: check once, then sleep
  // Pure pause-spins before the first yield: the answer to a small request often lands
  // within a microsecond when the peer runs on another core, and a yield costs ~0.3 us.
  uint32_t spins = 64;
};

// Waiter side. `ready` reads the shared condition (with acquire loads) and has no side
// effects. Polls per `policy`, then sleeps on the futex until ready() or until
// `futex_timeout` has passed. Spurious wake-ups are absorbed here; kTimedOut means the time
// really passed. Callers loop on kTimedOut so they can check peer liveness between waits.
template <class Ready>
WaitResult wait(Doorbell& bell, Ready ready, PollPolicy policy,
                std::chrono::nanoseconds futex_timeout) {
  for (uint32_t i = 0; i < policy.spins; ++i) {
    if (ready()) return WaitResult::kReady;
    cpu_relax();
  }
  if (policy.budget > std::chrono::nanoseconds::zero()) {
    const auto poll_end = std::chrono::steady_clock::now() + policy.budget;
    do {
      if (ready()) return WaitResult::kReady;
      yield_core();
    } while (std::chrono::steady_clock::now() < poll_end);
  }
  // Caps the timeout so the deadline cannot overflow; callers loop anyway.
  constexpr std::chrono::nanoseconds kMaxTimeout = std::chrono::hours(24);
  if (futex_timeout > kMaxTimeout) futex_timeout = kMaxTimeout;
  const auto deadline = std::chrono::steady_clock::now() + futex_timeout;
  for (;;) {
    // Read before announcing sleep: a ring after this point changes seq, so the futex
    // refuses to sleep (EAGAIN) rather than miss it.
    const uint32_t seen = bell.seq.load(std::memory_order_acquire);
    bell.sleeping.store(1, std::memory_order_seq_cst);
    // Store-load barrier between the flag and the check in ready(); pairs with ring().
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ready()) {
      bell.sleeping.store(0, std::memory_order_relaxed);
      return WaitResult::kReady;
    }
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds::zero()) {
      bell.sleeping.store(0, std::memory_order_relaxed);
      return WaitResult::kTimedOut;
    }
    futex_wait(&bell.seq, seen, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
    // relaxed: a waker that still sees 1 only makes one needless wake; the next round sets
    // the flag again with the full barrier before checking.
    bell.sleeping.store(0, std::memory_order_relaxed);
    if (ready()) return WaitResult::kReady;
    // Woken without data (a late ring from an earlier round, EINTR): sleep again for the
    // rest of the time.
  }
}

}  // namespace kvpool::shm
