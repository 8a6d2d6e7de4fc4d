// Deciding whether an attached client is still there (docs/design.md §5), without trusting anything
// the client can write. The pidfd is the kernel's word on the process; the lease's futex
// word is the client's claim, believed only when it names one of the process's threads.
// No pthread call ever touches the lease (it lives in client-writable memory).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "kvpool/shm/lease_mutex.hpp"

namespace kvpool::daemon {

enum class Verdict {
  kAlive,     // the process runs and its lease names one of its threads: keep it
  kDetached,  // it gave its lease back: reclaim, no crash
  kDied,      // the process exited, the lease's owner thread died, or the lease names no
              // thread of the client: reclaim as a crash
};

struct Judgement {
  Verdict verdict;
  std::string reason;  // for the log: "process exited", "lease names tid 1 (not a thread of 42)"
};

// True once the process behind `pidfd` has exited (the pidfd polls readable).
bool process_exited(int pidfd);

// True when `tid`, as the process sees it (its own, innermost pid namespace), is one of
// the threads of `pid` (as this process sees it). Reads /proc/<pid>/task/*/status NSpid.
bool is_thread_of(pid_t pid, uint32_t tid);

// The verdict on a client whose socket hung up or whose process may have exited.
Judgement judge(int pidfd, pid_t pid, shm::LeaseWord lease);

}  // namespace kvpool::daemon
