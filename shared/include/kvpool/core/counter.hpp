// Counters in shared memory with one writer (the daemon's engine thread, or a pool core's
// one writer): a relaxed load and store is enough, and cheaper than a locked add on the hot
// path; readers in other processes see a whole value, possibly a moment old.
#pragma once

#include <atomic>

namespace kvpool {

template <typename T, typename D>
inline void bump(std::atomic<T>& a, D delta) {
  a.store(static_cast<T>(a.load(std::memory_order_relaxed) + delta), std::memory_order_relaxed);
}

}  // namespace kvpool
