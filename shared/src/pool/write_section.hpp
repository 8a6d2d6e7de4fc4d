// What every file of the pool core that changes the arena shares (pool_core.cpp,
// pool_release.cpp, pool_keyed.cpp, ...): the write sequence readers use to see a call in
// progress (counters: kvpool/core/counter.hpp).
#pragma once

#include <atomic>
#include <cstdint>

namespace kvpool::pool {

// The writer's side of PoolStats::write_seq: odd for the duration of one mutating call.
class WriteSection {
 public:
  explicit WriteSection(std::atomic<uint32_t>& seq) : seq_(seq) {
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  ~WriteSection() {
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  WriteSection(const WriteSection&) = delete;
  WriteSection& operator=(const WriteSection&) = delete;

 private:
  std::atomic<uint32_t>& seq_;
};

}  // namespace kvpool::pool
