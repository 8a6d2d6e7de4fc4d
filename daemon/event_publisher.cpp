#include "daemon/event_publisher.hpp"

#include "kvpool/core/clock.hpp"

namespace kvpool::daemon {
namespace {

shm::EventPayload payload(shm::EventType type, uint32_t pool, uint64_t time_ns) {
  shm::EventPayload p{};
  p.type = static_cast<uint8_t>(type);
  p.pool = static_cast<uint16_t>(pool);
  p.time_ns = time_ns;
  return p;
}

}  // namespace

void EventPublisher::on_stored(uint32_t pool, std::span<const pool::StoredBlock> blocks) {
  if (blocks.empty()) return;
  const uint64_t t = now_ns(CLOCK_REALTIME);
  scratch_.clear();
  tokens_.clear();
  bool any_tokens = false;
  for (const pool::StoredBlock& b : blocks) {
    any_tokens = any_tokens || !b.tokens.empty();
    tokens_.push_back(b.tokens);
    shm::EventPayload p = payload(shm::EventType::kStored, pool, t);
    p.sequence_hash = b.sequence_hash;
    p.block_hash = b.block_hash;
    p.parent_hash = b.has_parent ? b.parent_hash : 0;
    p.priority = b.priority;
    p.flags = b.has_parent ? shm::kEventHasParent : 0;
    scratch_.push_back(p);
  }
  // Without tokens the append is the same as before tokens existed: the area stays untouched.
  writers_[pool].append(scratch_, any_tokens ? std::span<const std::span<const uint32_t>>(tokens_)
                                             : std::span<const std::span<const uint32_t>>());
}

void EventPublisher::on_removed(uint32_t pool, uint64_t sequence_hash) {
  shm::EventPayload p = payload(shm::EventType::kRemoved, pool, now_ns(CLOCK_REALTIME));
  p.sequence_hash = sequence_hash;
  writers_[pool].append(p);
}

}  // namespace kvpool::daemon
