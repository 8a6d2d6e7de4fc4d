#include "kvpool/pool/arena_view.hpp"

#include <atomic>
#include <cstring>
#include <utility>

#include "kvpool/core/checksum.hpp"

namespace kvpool::pool {

Result<ArenaView> ArenaView::attach(const void* memory, size_t bytes, std::string name) {
  KVPOOL_RETURN_IF_ERROR(PoolCore::validate(memory, bytes));
  ArenaView v;
  v.header_ = static_cast<const ArenaHeader*>(memory);
  v.owners_ = reinterpret_cast<const OwnerRecord*>(static_cast<const char*>(memory) +
                                                   v.header_->off_owners);
  v.checksums_ = reinterpret_cast<const uint64_t*>(static_cast<const char*>(memory) +
                                                   v.header_->off_checksums);
  v.bytes_ = bytes;
  v.name_ = std::move(name);
  return v;
}

PoolCounts ArenaView::counts() const {
  // Gauges of the single writer: relaxed, each torn-free, together a moment's picture.
  const PoolStats& s = header_->stats;
  return PoolCounts{header_->num_blocks, s.free_blocks.load(std::memory_order_relaxed),
                    s.mutable_blocks.load(std::memory_order_relaxed),
                    s.active_blocks.load(std::memory_order_relaxed),
                    s.inactive_blocks.load(std::memory_order_relaxed)};
}

OwnerHoldings ArenaView::holdings(uint32_t owner) const {
  OwnerHoldings h;
  if (owner >= header_->max_owners) return h;
  // The engine writes these plain fields while we read: load each one whole (relaxed: no
  // other field is read on the strength of them).
  const OwnerRecord& o = owners_[owner];
  h.mutable_blocks = __atomic_load_n(&o.mutable_count, __ATOMIC_RELAXED);
  h.held_blocks = __atomic_load_n(&o.hold_entries, __ATOMIC_RELAXED);
  h.held_refs = __atomic_load_n(&o.hold_refs, __ATOMIC_RELAXED);
  return h;
}

uint64_t ArenaView::checksum(uint32_t id) const {
  if (id >= header_->num_blocks) return kNoChecksum;
  // Relaxed: the reader's reference to the block came in an answer the writer released
  // after it stored the checksum (the ring's release/acquire orders the two).
  return __atomic_load_n(&checksums_[id], __ATOMIC_RELAXED);
}

bool ArenaView::copy_to(void* out) const {
  // The writer keeps write_seq odd while a call changes the arena (acquire: the copy below
  // cannot start before this load). A copy taken between two equal even values saw no change.
  const std::atomic<uint32_t>& seq = header_->stats.write_seq;
  const uint32_t before = seq.load(std::memory_order_acquire);
  std::memcpy(out, header_, bytes_);
  // The copy's loads complete before the re-read of the sequence.
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint32_t after = seq.load(std::memory_order_relaxed);
  return before % 2 == 0 && before == after;
}

}  // namespace kvpool::pool
