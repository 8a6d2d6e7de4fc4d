#include "kvpool/pool/free_fifo.hpp"

#include "kvpool/core/counter.hpp"

namespace kvpool::pool {

void FreeFifo::push(uint32_t id) {
  BlockMeta& b = blocks_[id];
  b.state = static_cast<uint8_t>(BlockStateCode::kFree);
  b.flags = 0;
  b.next = kNone;
  b.prev = kNone;
  if (header_->free_tail == kNone) {
    header_->free_head = id;
  } else {
    blocks_[header_->free_tail].next = id;
  }
  header_->free_tail = id;
  bump(header_->stats.free_blocks, 1);
}

uint32_t FreeFifo::pop() {
  uint32_t id = header_->free_head;
  header_->free_head = blocks_[id].next;
  if (header_->free_head == kNone) header_->free_tail = kNone;
  bump(header_->stats.free_blocks, -1);
  return id;
}

}  // namespace kvpool::pool
