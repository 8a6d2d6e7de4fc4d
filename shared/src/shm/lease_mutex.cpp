#include "kvpool/shm/lease_mutex.hpp"

#include <linux/futex.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <new>

#include "kvpool/shm/futex.hpp"

namespace kvpool::shm {
namespace {

// pthread functions return the error number instead of setting errno.
Status check(int rc, std::string_view what) { return rc == 0 ? Status() : io_error(what, rc); }

LockResult after_lock(LeaseMutex& mutex, int rc) {
  switch (rc) {
    case 0:
      return LockResult::kAcquired;
    case EBUSY:
      return LockResult::kBusy;
    case EOWNERDEAD:
      // We hold it now. Mark it consistent at once: unlocking without doing so turns it
      // into ENOTRECOVERABLE forever. What the mutex protects is for the caller to repair.
      if (::pthread_mutex_consistent(&mutex.m) != 0) {
        ::pthread_mutex_unlock(&mutex.m);
        return LockResult::kNotRecoverable;
      }
      return LockResult::kOwnerDied;
    case ENOTRECOVERABLE:
      return LockResult::kNotRecoverable;
    default:
      return LockResult::kError;
  }
}

// glibc (2.36 checked) returns ENOTRECOVERABLE from pthread_mutex_trylock on a robust
// mutex but leaves the mutex's futex word holding the caller's thread id: every other
// locker would then block forever instead of getting ENOTRECOVERABLE, and this thread's
// next lock() would say EDEADLK. Give the word back, as pthread_mutex_lock does.
void release_leaked_word(LeaseMutex& mutex) {
#ifdef __GLIBC__
  std::atomic_ref<int> word(mutex.m.__data.__lock);
  int seen = word.load(std::memory_order_relaxed);
  if ((seen & FUTEX_TID_MASK) != ::gettid()) return;
  // release: nothing to publish, but pairs with the acquire of whoever takes it next.
  if (word.compare_exchange_strong(seen, 0, std::memory_order_release) &&
      (seen & FUTEX_WAITERS) != 0) {
    static_assert(sizeof(std::atomic<uint32_t>) == sizeof(int));
    futex_wake_all(reinterpret_cast<std::atomic<uint32_t>*>(&mutex.m.__data.__lock));
  }
#else
  (void)mutex;
#endif
}

}  // namespace

std::string_view lock_result_name(LockResult r) {
  switch (r) {
    case LockResult::kAcquired:
      return "Acquired";
    case LockResult::kOwnerDied:
      return "OwnerDied";
    case LockResult::kBusy:
      return "Busy";
    case LockResult::kNotRecoverable:
      return "NotRecoverable";
    case LockResult::kError:
      return "Error";
  }
  return "Unknown";
}

Status init(LeaseMutex& mutex) {
  pthread_mutexattr_t attr;
  KVPOOL_RETURN_IF_ERROR(check(::pthread_mutexattr_init(&attr), "pthread_mutexattr_init"));
  Status st = check(::pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED),
                    "pthread_mutexattr_setpshared");
  if (st) {
    st = check(::pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST),
               "pthread_mutexattr_setrobust");
  }
  if (st) {
    st = check(::pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK),
               "pthread_mutexattr_settype");
  }
  if (st) {
    // The memory may hold a previous life's mutex (a reset slot); start from a fresh object.
    new (&mutex.m) pthread_mutex_t{};
    st = check(::pthread_mutex_init(&mutex.m, &attr), "pthread_mutex_init");
  }
  ::pthread_mutexattr_destroy(&attr);
  return st;
}

LockResult lock(LeaseMutex& mutex) { return after_lock(mutex, ::pthread_mutex_lock(&mutex.m)); }

LockResult try_lock(LeaseMutex& mutex) {
  int rc = ::pthread_mutex_trylock(&mutex.m);
  if (rc == ENOTRECOVERABLE) release_leaked_word(mutex);
  return after_lock(mutex, rc);
}

Status unlock(LeaseMutex& mutex) {
  return check(::pthread_mutex_unlock(&mutex.m), "pthread_mutex_unlock lease mutex");
}

LeaseWord peek(const LeaseMutex& mutex) {
#ifdef __GLIBC__
  // One acquire load of the word (std::atomic_ref<const int> is C++26; the builtin is what
  // atomic_ref compiles to). Only the value is used; nothing is dereferenced.
  const auto v = static_cast<uint32_t>(__atomic_load_n(&mutex.m.__data.__lock, __ATOMIC_ACQUIRE));
  return LeaseWord{v & FUTEX_TID_MASK, (v & FUTEX_OWNER_DIED) != 0};
#else
#error "kvpool reads the robust mutex's futex word; only glibc's layout is known"
#endif
}

Status destroy(LeaseMutex& mutex) {
  return check(::pthread_mutex_destroy(&mutex.m), "pthread_mutex_destroy lease mutex");
}

}  // namespace kvpool::shm
