// The lease mutex: a POSIX robust, process-shared mutex that a client holds for as long as
// it is attached, so that its death can be proven (EOWNERDEAD) and not only guessed
// (DESIGN §5). A thin wrapper over pthreads because Boost 1.74's interprocess mutexes are
// not robust, and Boost 1.78+ leaves a dead owner's mutex permanently unusable.
//
// A robust mutex belongs to a *thread*, not a process: it is orphaned (EOWNERDEAD for the
// next locker) as soon as the locking thread exits, even if its process lives on. Lock it
// from a thread that lives exactly as long as the lease it stands for, and unlock it from
// that same thread.
//
// glibc keeps a robust mutex on the owning thread's robust list through pointers stored
// inside the mutex, i.e. in shared memory. A process should hold a lease mutex in memory
// that another live process can write only briefly (e.g. the daemon probing with
// try_lock, then unlocking at once): a scribbling peer could corrupt that list.
#pragma once

#include <pthread.h>

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

}  // namespace kvpool::shm
