// Futexes on 32-bit words in shared memory, and the doorbell protocol built on them
// (docs/design.md §4): the waiter spins briefly, then sleeps on the futex; the waker pays for a
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
//
// `sleeping` holds the waiter's CPU tag (cpu_tag(): its CPU + 1, never 0) rather than a
// plain 1, so that a waker learns where the thread it wakes will most likely run: kvpoold
// gets out of the way at once of a client it wakes on its own core (docs/design.md §4).
struct Doorbell {
  std::atomic<uint32_t> seq;       // bumped by wakers; the futex word
  std::atomic<uint32_t> sleeping;  // nonzero (the waiter's CPU tag) while it may be asleep
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

// cpu_tag() when sched_getcpu fails (no getcpu under a seccomp filter): nonzero, so a
// sleeper still says it sleeps, and no real CPU has it, so it never names a shared core.
inline constexpr uint32_t kUnknownCpuTag = 0xFFFFFFFFu;

// The calling thread's CPU + 1 (0 is never a tag), or kUnknownCpuTag: sched_getcpu, which
// glibc (2.35 and later) answers from the rseq area without a system call. A hint only: the
// thread may move at any time.
uint32_t cpu_tag();

// Waker side. Call after publishing the data the waiter waits for (with a release store).
// Returns the CPU tag of the waiter it woke, 0 when the waiter was not asleep.
inline uint32_t ring(Doorbell& bell) {
  // Orders the caller's publishing store before the load of `sleeping` (store-load: only a
  // seq_cst fence does this). Pairs with the fence in wait().
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t sleeper = bell.sleeping.load(std::memory_order_relaxed);
  if (sleeper != 0) {
    // release pairs with the waiter's acquire load of seq: a waiter that already sees this
    // increment also sees the data published before it.
    bell.seq.fetch_add(1, std::memory_order_release);
    futex_wake_all(&bell.seq);
  }
  return sleeper;
}

enum class WaitResult {
  kReady,     // ready() returned true
  kTimedOut,  // futex_timeout passed and ready() is still false
};

// How long a waiter polls before it sleeps, and how (docs/design.md §4). Polling is bounded in
// time, not in passes: a pass costs 40 ns on an idle core and a whole time slice on a
// shared one.
//
// Polling never yields the core. sched_yield hands the core to whoever else is runnable on
// it: when that is the peer we wait for, good, but when it is a CPU-bound neighbour (a
// compiler, a tokenizer) the yielder gets the core back only after the neighbour's time
// slice, 3-4 ms on this VM, where a thread that sleeps is woken with preemption. So the
// waiter pause-spins, and sleeps on the futex as soon as spinning cannot help: when the
// budget is spent, or when the peer has not even started on our work after `start_grace`.
// A peer that has not started is not running: it waits for a core, most likely this one
// (both pinned to one core, or more runnable threads than cores), and sleeping is the
// fastest way to hand it over.
struct PollPolicy {
  std::chrono::nanoseconds budget{0};  // 0: check once, then sleep
  // With a `started` check (wait() below): how long the peer may take to pick our work up
  // before we stop polling and sleep. 0: no such check.
  std::chrono::nanoseconds start_grace{0};
};

// Waiter side. `ready` reads the shared condition (with acquire loads) and has no side
// effects; so does `started`, which says whether the peer has begun on our work (has
// consumed our request). Polls per `policy`, then sleeps on the futex until ready() or
// until `futex_timeout` has passed. Spurious wake-ups are absorbed here; kTimedOut means
// the time really passed. Callers loop on kTimedOut so they can check peer liveness
// between waits.
template <class Ready, class Started>
WaitResult wait(Doorbell& bell, Ready ready, Started started, PollPolicy policy,
                std::chrono::nanoseconds futex_timeout) {
  if (ready()) return WaitResult::kReady;
  if (policy.budget > std::chrono::nanoseconds::zero()) {
    // The clock is read once per burst of pauses (a burst is ~1 us on x86: one pause is
    // ~10-40 ns on current cores), so an answer that lands within a microsecond costs no
    // clock read at all.
    constexpr int kPausesPerCheck = 32;
    const auto t0 = std::chrono::steady_clock::now();
    const auto poll_end = t0 + policy.budget;
    bool peer_started = policy.start_grace <= std::chrono::nanoseconds::zero();
    for (;;) {
      for (int i = 0; i < kPausesPerCheck; ++i) {
        cpu_relax();
        if (ready()) return WaitResult::kReady;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= poll_end) break;
      if (!peer_started) {
        peer_started = started();
        if (!peer_started && now - t0 >= policy.start_grace) break;
      }
    }
  }
  // Caps the timeout so the deadline cannot overflow; callers loop anyway.
  constexpr std::chrono::nanoseconds kMaxTimeout = std::chrono::hours(24);
  if (futex_timeout > kMaxTimeout) futex_timeout = kMaxTimeout;
  const auto deadline = std::chrono::steady_clock::now() + futex_timeout;
  for (;;) {
    // Read before announcing sleep: a ring after this point changes seq, so the futex
    // refuses to sleep (EAGAIN) rather than miss it.
    const uint32_t seen = bell.seq.load(std::memory_order_acquire);
    bell.sleeping.store(cpu_tag(), std::memory_order_seq_cst);
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

// Without a `started` check: polls for the whole budget.
template <class Ready>
WaitResult wait(Doorbell& bell, Ready ready, PollPolicy policy,
                std::chrono::nanoseconds futex_timeout) {
  return wait(
      bell, ready, [] { return true; }, policy, futex_timeout);
}

}  // namespace kvpool::shm
