// The lease mutex: a POSIX robust, process-shared mutex that a client holds for as long as
// it is attached, so that its death can be proven (EOWNERDEAD) and not only guessed
// (docs/design.md §5). A thin wrapper over pthreads because Boost 1.74's interprocess mutexes are
// not robust, and Boost 1.78+ leaves a dead owner's mutex permanently unusable.
//
// A robust mutex belongs to a *thread*, not a process: it is orphaned (EOWNERDEAD for the
// next locker) as soon as the locking thread exits, even if its process lives on. Lock it
// from a thread that lives exactly as long as the lease it stands for, and unlock it from
// that same thread.
//
// glibc keeps a robust mutex on the owning thread's robust list through pointers stored
// inside the mutex, i.e. in shared memory. Only the client (whose segment it is) ever locks
// it. The daemon never calls pthread functions on it: a client that rewrites those pointers
// while the daemon holds the mutex would make glibc write through them in the daemon
// (a crash, or a write anywhere). The daemon reads the futex word instead (peek()).
#pragma once

#include <pthread.h>

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "kvpool/core/status.hpp"

namespace kvpool::shm {

struct LeaseMutex {
  pthread_mutex_t m;
};
static_assert(std::is_standard_layout_v<LeaseMutex>);
static_assert(std::is_trivially_copyable_v<LeaseMutex>);
static_assert(sizeof(LeaseMutex) == sizeof(pthread_mutex_t));
static_assert(alignof(LeaseMutex) <= 8, "fits any 8-aligned slot in a segment layout");

enum class LockResult {
  kAcquired,        // the caller holds the mutex
  kOwnerDied,       // the previous owner died holding it; made consistent, the caller holds it
  kBusy,            // try_lock only: another live thread holds it
  kNotRecoverable,  // a previous owner-death was never repaired; the mutex is unusable
                    // until init() again
  kError,           // anything else (not initialised, relocked by its owner, ...)
};

std::string_view lock_result_name(LockResult r);

// Initialises a mutex in place (PTHREAD_PROCESS_SHARED, PTHREAD_MUTEX_ROBUST, and
// ERRORCHECK so that relocking or unlocking by a non-owner is an error, not a hang).
// Only when nobody can be using it: at segment creation, or when a slot is reset.
Status init(LeaseMutex& mutex);

// Blocks until acquired. kOwnerDied: the caller holds it; repair what it protects.
LockResult lock(LeaseMutex& mutex);

// Never blocks: kBusy while a live thread holds it.
LockResult try_lock(LeaseMutex& mutex);

// Only from the thread that locked it.
Status unlock(LeaseMutex& mutex);

// Only when no thread holds it or waits on it.
Status destroy(LeaseMutex& mutex);

// What the mutex's futex word says, read with one atomic load and no pthread call: the
// daemon's only way to look at a lease that lives in client-writable memory. The word is
// 0 (unlocked), the owner's tid, or has FUTEX_OWNER_DIED set by the kernel when its owner
// thread died. It is a claim by an untrusted peer, never proof of life on its own: the
// caller checks the tid against the client's threads and the pidfd.
struct LeaseWord {
  uint32_t tid = 0;         // the owner thread's tid (in the owner's pid namespace), or 0
  bool owner_died = false;  // FUTEX_OWNER_DIED
};
LeaseWord peek(const LeaseMutex& mutex);

}  // namespace kvpool::shm
