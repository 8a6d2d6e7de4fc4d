// Which block each slot of the disk tier holds, in the daemon's memory only (the file is
// the durable copy; slot_file.hpp rebuilds this at every start).
//
// A slot is free, being written (not yet findable), published (findable: its data was
// durable before it was published), or dropped (unfindable, waiting for its readers).
// Eviction order: least recently used published slot first, skipping slots with reads in
// flight. A write counts as a use when it starts (claim), not when it completes, so the order
// is the order writes were started in and does not depend on which of the writes in flight
// the device finishes first (a model can follow it: kvpool-replay's tier_sim); a read counts
// when it starts too; at a start the order is the write order. A slot leaves the index
// before it is written again, so a reader never meets new bytes.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/disk/slot_file.hpp"
#include "daemon/disk/slot_format.hpp"

namespace kvpool::daemon::disk {

inline constexpr uint32_t kNoSlot = 0xFFFFFFFFu;

enum class SlotState : uint8_t { kFree, kWriting, kPublished, kDropped };

struct SlotEntry {
  SlotState state = SlotState::kFree;
  uint32_t readers = 0;
  uint32_t prev = kNoSlot;  // LRU list (published slots only)
  uint32_t next = kNoSlot;
  uint64_t last_use = 0;  // when its write started or it was last read: the LRU's order
  SlotHeader header{};    // what the slot holds (valid unless free)
};

class DiskIndex {
 public:
  explicit DiskIndex(uint32_t num_slots);

  // The slots a start found; of two claiming one hash the later write wins.
  void load(const std::vector<FoundSlot>& found);

  uint32_t find(uint64_t sequence_hash) const;  // published only; kNoSlot otherwise
  bool known(uint64_t sequence_hash) const;     // published or being written
  // A slot to write `hash` into: free, else the least recently used published one without
  // readers (its hash goes to *evicted). kNoSlot when every slot is busy.
  uint32_t claim(uint64_t hash, uint64_t* evicted, bool* did_evict);
  void publish(uint32_t slot, const SlotHeader& header);  // writing -> published (MRU)
  void abandon(uint32_t slot);                            // a failed write: free again
  // Bad data: out of the index now; free once its last reader is done.
  void drop(uint32_t slot);
  void add_reader(uint32_t slot) { ++slots_[slot].readers; }
  void remove_reader(uint32_t slot);
  void touch(uint32_t slot);  // a read: most recently used

  const SlotEntry& at(uint32_t slot) const { return slots_[slot]; }
  uint32_t used() const { return static_cast<uint32_t>(by_hash_.size()); }
  uint32_t total() const { return static_cast<uint32_t>(slots_.size()); }
  // Published hashes, least recently used first (tests compare it with a model).
  std::vector<uint64_t> lru_order() const;

 private:
  void lru_push_back(uint32_t slot);
  // Into the LRU list by last_use: a write that completes after later ones goes before them.
  void lru_insert_by_use(uint32_t slot);
  void lru_remove(uint32_t slot);
  void make_free(uint32_t slot);

  std::vector<SlotEntry> slots_;
  std::vector<uint32_t> free_;  // a stack
  std::unordered_map<uint64_t, uint32_t> by_hash_;
  std::unordered_set<uint64_t> writing_;
  uint32_t lru_head_ = kNoSlot;  // least recently used
  uint32_t lru_tail_ = kNoSlot;
  uint64_t uses_ = 0;  // last_use's clock
};

}  // namespace kvpool::daemon::disk
