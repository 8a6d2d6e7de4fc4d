#include "kvpool/pool/owner_holds.hpp"

#include "kvpool/core/counter.hpp"

namespace kvpool::pool {

void OwnerHolds::push_mutable(uint32_t owner, uint32_t id) {
  OwnerRecord& o = owners_[owner];
  BlockMeta& b = blocks_[id];
  b.state = static_cast<uint8_t>(BlockStateCode::kMutable);
  b.owner = owner;
  b.prev = kNone;
  b.next = o.mutable_head;
  if (o.mutable_head != kNone) blocks_[o.mutable_head].prev = id;
  o.mutable_head = id;
  ++o.mutable_count;
  bump(header_->stats.mutable_blocks, 1);
}

void OwnerHolds::remove_mutable(uint32_t owner, uint32_t id) {
  OwnerRecord& o = owners_[owner];
  BlockMeta& b = blocks_[id];
  if (b.prev != kNone) {
    blocks_[b.prev].next = b.next;
  } else {
    o.mutable_head = b.next;
  }
  if (b.next != kNone) blocks_[b.next].prev = b.prev;
  b.prev = kNone;
  b.next = kNone;
  --o.mutable_count;
  bump(header_->stats.mutable_blocks, -1);
}

bool OwnerHolds::add(uint32_t owner, uint32_t id) {
  OwnerRecord& o = owners_[owner];
  uint64_t k = key(owner, id);
  uint32_t h = table_.find(k);
  if (h == kNone) {
    h = header_->hold_free_head;
    if (h == kNone) return false;  // callers check capacity first; defensive
    header_->hold_free_head = holds_[h].next;
    HoldEntry& e = holds_[h];
    e = HoldEntry{id, owner, 0, kNone, o.hold_head, 0};
    if (o.hold_head != kNone) holds_[o.hold_head].prev = h;
    o.hold_head = h;
    ++o.hold_entries;
    table_.insert(k, h);
    bump(header_->stats.holds_used, 1);
  }
  ++holds_[h].count;
  ++o.hold_refs;
  return true;
}

uint32_t OwnerHolds::drop(uint32_t owner, uint32_t id, bool all) {
  uint64_t k = key(owner, id);
  uint32_t h = table_.find(k);
  if (h == kNone) return 0;
  OwnerRecord& o = owners_[owner];
  HoldEntry& e = holds_[h];
  const uint32_t dropped = all ? e.count : 1;
  o.hold_refs -= dropped;
  e.count -= dropped;
  if (e.count > 0) return dropped;
  if (e.prev != kNone) {
    holds_[e.prev].next = e.next;
  } else {
    o.hold_head = e.next;
  }
  if (e.next != kNone) holds_[e.next].prev = e.prev;
  --o.hold_entries;
  table_.erase(k);
  e = HoldEntry{kNone, kNone, 0, kNone, header_->hold_free_head, 0};
  header_->hold_free_head = h;
  bump(header_->stats.holds_used, -1);
  return dropped;
}

}  // namespace kvpool::pool
