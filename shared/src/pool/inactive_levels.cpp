#include "kvpool/pool/inactive_levels.hpp"

#include "kvpool/core/counter.hpp"

namespace kvpool::pool {

void InactiveLevels::sift_up(uint32_t pos) {
  uint32_t lv = heap_[pos];
  while (pos > 0) {
    uint32_t parent = (pos - 1) / 2;
    if (levels_[heap_[parent]].priority <= levels_[lv].priority) break;
    heap_[pos] = heap_[parent];
    levels_[heap_[pos]].heap_pos = pos;
    pos = parent;
  }
  heap_[pos] = lv;
  levels_[lv].heap_pos = pos;
}

void InactiveLevels::sift_down(uint32_t pos) {
  uint32_t n = header_->level_count;
  uint32_t lv = heap_[pos];
  while (true) {
    uint32_t child = 2 * pos + 1;
    if (child >= n) break;
    if (child + 1 < n && levels_[heap_[child + 1]].priority < levels_[heap_[child]].priority)
      ++child;
    if (levels_[lv].priority <= levels_[heap_[child]].priority) break;
    heap_[pos] = heap_[child];
    levels_[heap_[pos]].heap_pos = pos;
    pos = child;
  }
  heap_[pos] = lv;
  levels_[lv].heap_pos = pos;
}

uint32_t InactiveLevels::level_for(uint32_t priority) {
  uint32_t lv = table_.find(priority);
  if (lv != kNone) return lv;
  lv = header_->level_free_head;
  // Every level in use (only a client inventing priorities on purpose gets there,
  // arena_layout.cpp's kMaxLevels): the lowest level takes it, evicted earlier, never lost.
  if (lv == kNone) return heap_[0];
  header_->level_free_head = levels_[lv].head;
  levels_[lv] = LevelRecord{priority, kNone, kNone, header_->level_count};
  heap_[header_->level_count++] = lv;
  sift_up(levels_[lv].heap_pos);
  table_.insert(priority, lv);
  return lv;
}

void InactiveLevels::release(uint32_t lv) {
  uint32_t pos = levels_[lv].heap_pos;
  uint32_t last = --header_->level_count;
  if (pos != last) {
    // The last level fills the hole; it belongs either below or above it.
    uint32_t moved = heap_[last];
    heap_[pos] = moved;
    levels_[moved].heap_pos = pos;
    sift_down(pos);
    if (levels_[moved].heap_pos == pos) sift_up(pos);
  }
  table_.erase(levels_[lv].priority);
  levels_[lv] = LevelRecord{0, header_->level_free_head, kNone, kNone};
  header_->level_free_head = lv;
}

void InactiveLevels::push(uint32_t id) {
  BlockMeta& b = blocks_[id];
  uint32_t lv = level_for(b.priority);
  LevelRecord& L = levels_[lv];
  b.state = static_cast<uint8_t>(BlockStateCode::kInactive);
  b.level = lv;
  b.next = kNone;
  b.prev = L.tail;
  if (L.tail != kNone) {
    blocks_[L.tail].next = id;
  } else {
    L.head = id;
  }
  L.tail = id;
  bump(header_->stats.inactive_blocks, 1);
}

void InactiveLevels::remove(uint32_t id) {
  BlockMeta& b = blocks_[id];
  uint32_t lv = b.level;
  LevelRecord& L = levels_[lv];
  if (b.prev != kNone) {
    blocks_[b.prev].next = b.next;
  } else {
    L.head = b.next;
  }
  if (b.next != kNone) {
    blocks_[b.next].prev = b.prev;
  } else {
    L.tail = b.prev;
  }
  b.prev = kNone;
  b.next = kNone;
  if (L.head == kNone) release(lv);
  bump(header_->stats.inactive_blocks, -1);
}

uint32_t InactiveLevels::pop() {
  uint32_t id = levels_[heap_[0]].head;
  remove(id);
  return id;
}

}  // namespace kvpool::pool
