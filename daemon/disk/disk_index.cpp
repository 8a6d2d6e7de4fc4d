#include "daemon/disk/disk_index.hpp"

#include <algorithm>

namespace kvpool::daemon::disk {

DiskIndex::DiskIndex(uint32_t num_slots) : slots_(num_slots) {
  free_.reserve(num_slots);
  for (uint32_t s = num_slots; s-- > 0;) free_.push_back(s);  // slot 0 on top
  by_hash_.reserve(num_slots);
}

void DiskIndex::load(const std::vector<FoundSlot>& found) {
  std::vector<const FoundSlot*> order;
  for (const FoundSlot& f : found) order.push_back(&f);
  std::sort(order.begin(), order.end(), [](const FoundSlot* a, const FoundSlot* b) {
    return a->header.write_seq < b->header.write_seq;
  });
  std::vector<uint8_t> taken(slots_.size(), 0);
  for (const FoundSlot* f : order) {
    if (f->slot >= slots_.size()) continue;
    if (auto it = by_hash_.find(f->header.sequence_hash); it != by_hash_.end()) {
      // An older copy of the same block: the newer one (this) wins.
      lru_remove(it->second);
      slots_[it->second] = SlotEntry{};
      taken[it->second] = 0;
      by_hash_.erase(it);
    }
    const auto s = static_cast<uint32_t>(f->slot);
    slots_[s].state = SlotState::kPublished;
    slots_[s].header = f->header;
    slots_[s].last_use = ++uses_;
    by_hash_[f->header.sequence_hash] = s;
    taken[s] = 1;
    lru_push_back(s);
  }
  free_.clear();
  for (uint32_t s = static_cast<uint32_t>(slots_.size()); s-- > 0;)
    if (!taken[s]) free_.push_back(s);
}

uint32_t DiskIndex::find(uint64_t hash) const {
  auto it = by_hash_.find(hash);
  return it == by_hash_.end() ? kNoSlot : it->second;
}

bool DiskIndex::known(uint64_t hash) const {
  return by_hash_.count(hash) != 0 || writing_.count(hash) != 0;
}

uint32_t DiskIndex::claim(uint64_t hash, uint64_t* evicted, bool* did_evict) {
  *did_evict = false;
  uint32_t s = kNoSlot;
  if (!free_.empty()) {
    s = free_.back();
    free_.pop_back();
  } else {
    for (uint32_t c = lru_head_; c != kNoSlot; c = slots_[c].next) {
      if (slots_[c].readers == 0) {
        s = c;
        break;
      }
    }
    if (s == kNoSlot) return kNoSlot;
    // Unpublished before it is written again: nobody can find the old block any more.
    lru_remove(s);
    by_hash_.erase(slots_[s].header.sequence_hash);
    *evicted = slots_[s].header.sequence_hash;
    *did_evict = true;
  }
  slots_[s] = SlotEntry{};
  slots_[s].state = SlotState::kWriting;
  slots_[s].last_use = ++uses_;
  slots_[s].header.sequence_hash = hash;
  writing_.insert(hash);
  return s;
}

void DiskIndex::publish(uint32_t slot, const SlotHeader& header) {
  SlotEntry& e = slots_[slot];
  writing_.erase(e.header.sequence_hash);
  e.header = header;
  if (auto it = by_hash_.find(header.sequence_hash); it != by_hash_.end()) {
    // Written twice (a re-registration raced its own write): keep the newer slot.
    drop(it->second);
  }
  e.state = SlotState::kPublished;
  by_hash_[header.sequence_hash] = slot;
  lru_insert_by_use(slot);
}

void DiskIndex::abandon(uint32_t slot) {
  writing_.erase(slots_[slot].header.sequence_hash);
  make_free(slot);
}

void DiskIndex::drop(uint32_t slot) {
  SlotEntry& e = slots_[slot];
  if (e.state != SlotState::kPublished) return;
  lru_remove(slot);
  by_hash_.erase(e.header.sequence_hash);
  e.state = SlotState::kDropped;
  if (e.readers == 0) make_free(slot);
}

void DiskIndex::remove_reader(uint32_t slot) {
  SlotEntry& e = slots_[slot];
  if (e.readers > 0) --e.readers;
  if (e.readers == 0 && e.state == SlotState::kDropped) make_free(slot);
}

void DiskIndex::touch(uint32_t slot) {
  if (slots_[slot].state != SlotState::kPublished) return;
  slots_[slot].last_use = ++uses_;
  lru_remove(slot);
  lru_push_back(slot);
}

std::vector<uint64_t> DiskIndex::lru_order() const {
  std::vector<uint64_t> out;
  for (uint32_t c = lru_head_; c != kNoSlot; c = slots_[c].next)
    out.push_back(slots_[c].header.sequence_hash);
  return out;
}

void DiskIndex::make_free(uint32_t slot) {
  slots_[slot] = SlotEntry{};
  free_.push_back(slot);
}

void DiskIndex::lru_push_back(uint32_t slot) {
  SlotEntry& e = slots_[slot];
  e.prev = lru_tail_;
  e.next = kNoSlot;
  if (lru_tail_ == kNoSlot) {
    lru_head_ = slot;
  } else {
    slots_[lru_tail_].next = slot;
  }
  lru_tail_ = slot;
}

// Walks back from the most recent end past the slots used after this one: as many as were
// used while its write was in flight.
void DiskIndex::lru_insert_by_use(uint32_t slot) {
  SlotEntry& e = slots_[slot];
  uint32_t before = lru_tail_;  // the slot this one goes after (kNoSlot: the head)
  while (before != kNoSlot && slots_[before].last_use > e.last_use) before = slots_[before].prev;
  if (before == lru_tail_) {
    lru_push_back(slot);
    return;
  }
  const uint32_t after = before == kNoSlot ? lru_head_ : slots_[before].next;
  e.prev = before;
  e.next = after;
  slots_[after].prev = slot;
  if (before == kNoSlot) {
    lru_head_ = slot;
  } else {
    slots_[before].next = slot;
  }
}

void DiskIndex::lru_remove(uint32_t slot) {
  SlotEntry& e = slots_[slot];
  if (e.prev == kNoSlot) {
    if (lru_head_ != slot) return;  // not in the list
    lru_head_ = e.next;
  } else {
    slots_[e.prev].next = e.next;
  }
  if (e.next == kNoSlot) {
    lru_tail_ = e.prev;
  } else {
    slots_[e.next].prev = e.prev;
  }
  e.prev = e.next = kNoSlot;
}

}  // namespace kvpool::daemon::disk
