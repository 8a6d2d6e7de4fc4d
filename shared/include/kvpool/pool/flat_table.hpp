// A view over an array of TableEntry: open addressing, linear probing, backward-shift
// deletion (no tombstones, so probe lengths do not grow with churn). Fixed capacity, a power
// of two, kept at most half full by the caller. No allocation.
#pragma once

#include <cstdint>

#include "kvpool/pool/arena.hpp"

namespace kvpool::pool {

// The read side of a table: what a const arena view (a dead daemon's arena, a snapshot)
// may do with it.
class FlatTableReader {
 public:
  FlatTableReader() = default;
  FlatTableReader(const TableEntry* entries, uint32_t capacity)
      : e_(entries), mask_(capacity - 1) {}

  // Sequence hashes are already uniform, but hold keys (owner << 32 | block) are not:
  // a Fibonacci multiply spreads both for the price of one instruction.
  static uint32_t slot_of(uint64_t key, uint32_t mask) {
    return static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
  }

  uint32_t find(uint64_t key) const {
    for (uint32_t i = slot_of(key, mask_);; i = (i + 1) & mask_) {
      const TableEntry& en = e_[i];
      if (!en.used) return kNone;
      if (en.key == key) return en.value;
    }
  }

  void prefetch(uint64_t key) const { __builtin_prefetch(&e_[slot_of(key, mask_)]); }

 private:
  const TableEntry* e_ = nullptr;
  uint32_t mask_ = 0;
};

class FlatTable {
 public:
  FlatTable() = default;
  FlatTable(TableEntry* entries, uint32_t capacity) : e_(entries), mask_(capacity - 1) {}

  FlatTableReader reader() const { return FlatTableReader(e_, mask_ + 1); }
  uint32_t find(uint64_t key) const { return reader().find(key); }
  void prefetch(uint64_t key) const { reader().prefetch(key); }

  // The key must be absent (callers look it up first).
  void insert(uint64_t key, uint32_t value) {
    uint32_t i = slot_of(key, mask_);
    while (e_[i].used) i = (i + 1) & mask_;
    e_[i] = TableEntry{key, value, 1};
  }

  // Returns false when absent.
  bool erase(uint64_t key) {
    uint32_t i = slot_of(key, mask_);
    while (true) {
      if (!e_[i].used) return false;
      if (e_[i].key == key) break;
      i = (i + 1) & mask_;
    }
    // Backward shift: pull later entries of the cluster into the hole when their home
    // slot does not lie cyclically in (hole, j].
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & mask_; e_[j].used; j = (j + 1) & mask_) {
      uint32_t home = slot_of(e_[j].key, mask_);
      bool home_in_range = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!home_in_range) {
        e_[hole] = e_[j];
        hole = j;
      }
    }
    e_[hole].used = 0;
    return true;
  }

 private:
  static uint32_t slot_of(uint64_t key, uint32_t mask) {
    return FlatTableReader::slot_of(key, mask);
  }
  TableEntry* e_ = nullptr;
  uint32_t mask_ = 0;
};

}  // namespace kvpool::pool
