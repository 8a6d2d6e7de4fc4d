// Runs a test body on a new thread pinned to each CPU the test may run on, one after the
// other: for tests of what a thread learns of the CPU it runs on (shm::cpu_tag and what
// carries it).
#pragma once

#include <sched.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace kvpool::unit_test {

// Calls `body(cpu)` on one thread, pinned to each allowed CPU in turn (sched_setaffinity
// moves the calling thread before it returns). False, with nothing run, when the allowed
// set cannot be read: more CPUs than a cpu_set_t holds (EINVAL); the caller skips then.
template <class Body>
bool on_each_allowed_cpu(Body body) {
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  std::thread t([&] {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &allowed)) continue;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0)
          << "CPU " << cpu << ": " << std::strerror(errno);
      body(cpu);
    }
  });
  t.join();
  return true;
}

}  // namespace kvpool::unit_test
