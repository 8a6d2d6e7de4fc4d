#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <new>
#include <thread>

#include "kvpool/shm/futex.hpp"
#include "kvpool/shm/segment.hpp"
#include "unit/each_cpu.hpp"

namespace kvpool::shm {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Round trips per ping-pong test. Waits use no polling (on at least one side),
// so each one goes through the sleeping flag and the futex: exactly the window where a
// lost wake-up hangs.
constexpr uint64_t kRoundTrips = 100000;
// Each futex sleep is bounded. wait() absorbs a sleep that ran out if the condition is
// true by then, so a lost wake-up shows up as a wait that took (about) the whole bound,
// while a delivered one takes microseconds: such a wait is counted as a stall, and the
// test requires none.
constexpr auto kWaitBound = milliseconds(1000);
constexpr auto kStall = kWaitBound / 2;
constexpr uint64_t kGiveUpAfterStalls = 5;

struct PingPong {
  alignas(64) Doorbell to_b;  // side B sleeps on it
  alignas(64) Doorbell to_a;  // side A sleeps on it
  alignas(64) std::atomic<uint64_t> ping;
  alignas(64) std::atomic<uint64_t> pong;
  alignas(64) std::atomic<uint64_t> b_stalls;
};
static_assert(std::is_standard_layout_v<PingPong>);

// How each side waits: how long it polls before the futex, and how long its condition check
// dawdles after reading the counter. Dawdling widens the window between "condition false"
// and "asleep in the kernel" from nanoseconds to microseconds, so a protocol that can lose
// a wake-up in that window (e.g. reading seq after the check) loses it here, reliably.
struct Waiting {
  std::chrono::microseconds poll{0};  // pause-spinning before the futex
  std::chrono::microseconds dawdle{0};
};

// Waits until `counter` reaches `value`, counting every wait that stalled or timed out.
bool wait_for(Doorbell& bell, std::atomic<uint64_t>& counter, uint64_t value, Waiting how,
              uint64_t* stalls) {
  auto ready = [&] {
    bool r = counter.load(std::memory_order_acquire) >= value;
    if (how.dawdle.count() > 0) {
      const auto until = std::chrono::steady_clock::now() + how.dawdle;
      while (std::chrono::steady_clock::now() < until) cpu_relax();
    }
    return r;
  };
  for (;;) {
    const auto start = std::chrono::steady_clock::now();
    const WaitResult r = wait(bell, ready, PollPolicy{how.poll}, kWaitBound);
    if (r == WaitResult::kReady && std::chrono::steady_clock::now() - start < kStall) {
      return true;
    }
    if (++*stalls >= kGiveUpAfterStalls) return false;
    if (r == WaitResult::kReady) return true;
  }
}

// Side B: answers each ping with a pong.
bool run_b(PingPong& pp, Waiting how) {
  uint64_t stalls = 0;
  for (uint64_t i = 1; i <= kRoundTrips; ++i) {
    bool ok = wait_for(pp.to_b, pp.ping, i, how, &stalls);
    pp.b_stalls.store(stalls, std::memory_order_relaxed);
    if (!ok) return false;
    pp.pong.store(i, std::memory_order_release);
    ring(pp.to_a);
  }
  return true;
}

// Side A: pings and waits for each pong. Returns its own stalls.
uint64_t run_a(PingPong& pp, Waiting how) {
  uint64_t stalls = 0;
  for (uint64_t i = 1; i <= kRoundTrips; ++i) {
    pp.ping.store(i, std::memory_order_release);
    ring(pp.to_b);
    if (!wait_for(pp.to_a, pp.pong, i, how, &stalls)) break;
  }
  return stalls;
}

void ping_pong_between_processes(Waiting a, Waiting b) {
  Result<Segment> seg = Segment::create_anonymous("kvpool-pingpong", sizeof(PingPong));
  ASSERT_TRUE(seg) << seg.status().to_string();
  PingPong* pp = new (seg->data()) PingPong();

  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(run_b(*pp, b) ? 0 : 1);

  uint64_t a_stalls = run_a(*pp, a);
  if (a_stalls >= kGiveUpAfterStalls) ::kill(pid, SIGKILL);
  int status = 0;
  // Bounded: B finishes right after the last pong, or gives up after its own stalls.
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    if (::poll(&p, 1, 30000) == 0) ::kill(pid, SIGKILL);
    ::close(pidfd);
  }
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_EQ(a_stalls, 0u);
  EXPECT_EQ(pp->b_stalls.load(), 0u);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(pp->pong.load(), kRoundTrips);
}

// Both sides sleep on every wait.
TEST(FutexDoorbell, PingPongBetweenProcessesLosesNoWakeUp) {
  ping_pong_between_processes(Waiting{}, Waiting{});
}

// A goes to the futex on every wait, and its check dawdles, while B spins (bounded) and
// answers within a microsecond: B's pong and ring land while A is on its way into the
// kernel, on almost every round trip.
TEST(FutexDoorbell, SleeperAgainstFastAnswererLosesNoWakeUp) {
  using std::chrono::microseconds;
  ping_pong_between_processes(Waiting{microseconds(0), microseconds(5)},
                              Waiting{microseconds(200), microseconds(0)});
}

TEST(FutexDoorbell, PingPongBetweenThreadsLosesNoWakeUp) {
  PingPong pp{};
  bool b_ok = false;
  std::thread b([&] { b_ok = run_b(pp, Waiting{}); });
  uint64_t a_stalls = run_a(pp, Waiting{});
  b.join();  // bounded: B gives up after its own stalls if A stopped early
  EXPECT_EQ(a_stalls, 0u);
  EXPECT_EQ(pp.b_stalls.load(), 0u);
  EXPECT_TRUE(b_ok);
  EXPECT_EQ(pp.pong.load(), kRoundTrips);
}

TEST(FutexDoorbell, FutexWaitReportsMismatchAndTimeout) {
  std::atomic<uint32_t> word{5};
  EXPECT_EQ(futex_wait(&word, 6, seconds(10)), EAGAIN) << "value differs: no sleep";
  EXPECT_EQ(futex_wait(&word, 5, milliseconds(1)), ETIMEDOUT);
  EXPECT_EQ(futex_wait(&word, 5, milliseconds(-5)), ETIMEDOUT) << "negative means zero";
  futex_wake_all(&word);  // nobody sleeps: harmless
}

TEST(FutexDoorbell, WaitTimesOutAndClearsItsFlag) {
  Doorbell bell{};
  int calls = 0;
  auto never = [&] {
    ++calls;
    return false;
  };
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(wait(bell, never, PollPolicy{milliseconds(2)}, milliseconds(20)),
            WaitResult::kTimedOut);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(20));
  EXPECT_GE(calls, 100) << "2 ms of polling checks the condition many times";
  EXPECT_EQ(bell.sleeping.load(), 0u);
  EXPECT_EQ(wait(bell, never, PollPolicy{}, milliseconds(0)), WaitResult::kTimedOut);
  EXPECT_EQ(wait(
                bell, [] { return true; }, PollPolicy{}, seconds(10)),
            WaitResult::kReady);
  EXPECT_EQ(bell.sleeping.load(), 0u);
}

TEST(FutexDoorbell, RingWakesOnlyASleeper) {
  Doorbell bell{};
  EXPECT_EQ(ring(bell), 0u) << "no sleeper: nobody woken";
  EXPECT_EQ(bell.seq.load(), 0u) << "no sleeper: no increment, no system call";
  bell.sleeping.store(3);  // the CPU tag of a waiter on CPU 2
  EXPECT_EQ(ring(bell), 3u) << "the waker learns where the woken thread slept";
  EXPECT_EQ(bell.seq.load(), 1u);
  EXPECT_EQ(bell.sleeping.load(), 3u) << "the waker never touches the waiter's flag";
}

TEST(FutexDoorbell, SleeperWakesOnRingFromAnotherThread) {
  Doorbell bell{};
  std::atomic<bool> flag{false};
  std::thread waker([&] {
    // Ring only once the waiter has announced sleep: the wake must reach the futex.
    const auto give_up = std::chrono::steady_clock::now() + seconds(5);
    while (bell.sleeping.load(std::memory_order_acquire) == 0 &&
           std::chrono::steady_clock::now() < give_up) {
      cpu_relax();
    }
    flag.store(true, std::memory_order_release);
    ring(bell);
  });
  auto start = std::chrono::steady_clock::now();
  WaitResult r = wait(
      bell, [&] { return flag.load(std::memory_order_acquire); }, PollPolicy{}, seconds(10));
  waker.join();
  EXPECT_EQ(r, WaitResult::kReady);
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(5)) << "woken, not timed out";
}

// A thread pinned to one CPU sees that CPU's tag: what a sleeping waiter leaves in its
// doorbell and kvpoold in its park word.
TEST(FutexDoorbell, CpuTagNamesTheCpuTheThreadRunsOn) {
  const bool ran = kvpool::unit_test::on_each_allowed_cpu([](int cpu) {
    EXPECT_EQ(cpu_tag(), static_cast<uint32_t>(cpu) + 1) << "pinned to CPU " << cpu;
  });
  if (!ran) GTEST_SKIP() << "sched_getaffinity: " << std::strerror(errno);
}

// A peer that has not picked our work up within the start grace is not running (it waits
// for a core, likely ours): the waiter stops polling and sleeps, long before its budget.
TEST(FutexDoorbell, WaiterSleepsEarlyWhenThePeerHasNotStarted) {
  Doorbell bell{};
  std::atomic<bool> flag{false};
  std::atomic<WaitResult> result{WaitResult::kTimedOut};
  std::thread waiter([&] {
    result = wait(
        bell, [&] { return flag.load(std::memory_order_acquire); }, [] { return false; },
        PollPolicy{seconds(30), milliseconds(1)}, seconds(60));
  });
  // Within 10 s (a third of the 30 s budget) the waiter must have announced sleep.
  const auto give_up = std::chrono::steady_clock::now() + seconds(10);
  while (bell.sleeping.load(std::memory_order_acquire) == 0 &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  const bool slept_early = bell.sleeping.load(std::memory_order_acquire) != 0;
  flag.store(true, std::memory_order_release);
  ring(bell);
  waiter.join();
  EXPECT_TRUE(slept_early) << "still polling 10 s into a 30 s budget: start_grace ignored";
  EXPECT_EQ(result.load(), WaitResult::kReady);
}

// A peer that has started keeps the waiter polling for the whole budget: the answer then
// arrives without a futex wake (ring() finds nobody asleep and does not bump seq).
TEST(FutexDoorbell, WaiterKeepsPollingWhileThePeerWorks) {
  Doorbell bell{};
  std::atomic<bool> flag{false};
  // When ready() was first and last called (steady_clock ticks): the waiter polls as long as
  // the two keep drawing apart.
  std::atomic<int64_t> first_poll{0}, last_poll{0};
  std::atomic<WaitResult> result{WaitResult::kTimedOut};
  std::thread waiter([&] {
    result = wait(
        bell,
        [&] {
          const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
          int64_t none = 0;
          first_poll.compare_exchange_strong(none, now, std::memory_order_relaxed);
          last_poll.store(now, std::memory_order_relaxed);
          return flag.load(std::memory_order_acquire);
        },
        [] { return true; }, PollPolicy{seconds(30), milliseconds(1)}, seconds(60));
  });
  // Answer only once the waiter has been polling for 20 ms, well past the 1 ms grace.
  const auto polled_for = [&] {
    return std::chrono::steady_clock::duration(last_poll.load(std::memory_order_relaxed) -
                                               first_poll.load(std::memory_order_relaxed));
  };
  const auto give_up = std::chrono::steady_clock::now() + seconds(10);
  while (polled_for() < milliseconds(20) && std::chrono::steady_clock::now() < give_up)
    std::this_thread::yield();
  const bool polled_past_grace = polled_for() >= milliseconds(20);
  flag.store(true, std::memory_order_release);
  ring(bell);
  waiter.join();
  EXPECT_TRUE(polled_past_grace) << "the waiter stopped polling although its peer had started";
  EXPECT_EQ(result.load(), WaitResult::kReady);
  EXPECT_EQ(bell.seq.load(), 0u) << "the waiter slept although its peer had started";
}

}  // namespace
}  // namespace kvpool::shm
