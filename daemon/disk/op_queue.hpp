// A bounded, lock-free multi-producer multi-consumer queue (D. Vyukov's array queue):
// how ops go from the engine thread to the disk I/O threads and completions come back.
// Neither side ever takes a lock the other may hold, so an I/O thread that is descheduled,
// stopped (ptrace) or stuck in the kernel halfway through a push or pop can delay only
// the items behind that one cell, never the engine thread's own call: push and pop return
// at once (false: full / nothing ready).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace kvpool::daemon::disk {

template <class T>
class OpQueue {
 public:
  // Room for at least `min_capacity` items (rounded up to a power of two).
  explicit OpQueue(size_t min_capacity) {
    size_t cap = 2;
    while (cap < min_capacity) cap <<= 1;
    mask_ = cap - 1;
    cells_ = std::make_unique<Cell[]>(cap);
    for (size_t i = 0; i < cap; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }

  // False when full.
  bool push(const T& v) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    Cell* c = nullptr;
    for (;;) {
      c = &cells_[pos & mask_];
      // Acquire: the consumer that emptied this cell a lap ago is done reading it.
      const size_t seq = c->seq.load(std::memory_order_acquire);
      const auto dif = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (dif == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (dif < 0) {
        return false;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
    c->value = v;
    // Release: the value (and whatever the producer wrote before pushing) is visible to
    // the consumer whose acquire load sees this sequence.
    c->seq.store(pos + 1, std::memory_order_release);
    return true;
  }

  // False when nothing is ready.
  bool pop(T& out) {
    size_t pos = head_.load(std::memory_order_relaxed);
    Cell* c = nullptr;
    for (;;) {
      c = &cells_[pos & mask_];
      const size_t seq = c->seq.load(std::memory_order_acquire);
      const auto dif = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos + 1);
      if (dif == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (dif < 0) {
        return false;
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
    out = c->value;
    c->seq.store(pos + mask_ + 1, std::memory_order_release);  // free for the next lap
    return true;
  }

 private:
  struct Cell {
    std::atomic<size_t> seq{0};
    T value{};
  };
  // Producers and consumers on separate cache lines.
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) std::atomic<size_t> head_{0};
  alignas(64) std::unique_ptr<Cell[]> cells_;
  size_t mask_ = 0;
};

}  // namespace kvpool::daemon::disk
