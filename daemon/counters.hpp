// The control segment's counters have one writer, the engine thread: a relaxed load and
// store is enough (readers only ever see a whole value) and cheaper than a locked add.
#pragma once

#include <atomic>

namespace kvpool::daemon {

template <typename T, typename D>
void bump(std::atomic<T>& a, D d) {
  a.store(a.load(std::memory_order_relaxed) + static_cast<T>(d), std::memory_order_relaxed);
}

}  // namespace kvpool::daemon
