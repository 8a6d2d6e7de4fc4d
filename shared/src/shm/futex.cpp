#include "kvpool/shm/futex.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace kvpool::shm {
namespace {

// The kernel sees only an address: std::atomic<uint32_t> is a plain u32 (static_asserts in
// the header).
uint32_t* futex_word(std::atomic<uint32_t>* word) { return reinterpret_cast<uint32_t*>(word); }

}  // namespace

int futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  if (timeout < std::chrono::nanoseconds::zero()) timeout = std::chrono::nanoseconds::zero();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(secs.count());
  ts.tv_nsec = static_cast<long>((timeout - secs).count());
  // FUTEX_WAIT (not _PRIVATE): the word is in memory shared between processes.
  long rc = ::syscall(SYS_futex, futex_word(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
  return rc == 0 ? 0 : errno;
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  // Errors are impossible for a valid mapped address, and a waker has nothing to do
  // about them anyway: the waiter's timeout bounds the damage.
  ::syscall(SYS_futex, futex_word(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

uint32_t cpu_tag() {
  const int cpu = ::sched_getcpu();
  return cpu >= 0 ? static_cast<uint32_t>(cpu) + 1 : kUnknownCpuTag;
}

}  // namespace kvpool::shm
