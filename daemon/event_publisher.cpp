#include "daemon/event_publisher.hpp"

#include <algorithm>

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
  stored(pool, blocks, 0);
}

void EventPublisher::on_removed(uint32_t pool, uint64_t sequence_hash) {
  removed(pool, sequence_hash, 0);
}

void EventPublisher::on_disk_stored(uint32_t pool, std::span<const pool::StoredBlock> blocks) {
  // A start announces its whole disk index: batches of at most a quarter of the ring, so a
  // reader keeping up is never lapped by one append (each batch is a message of its own; a
  // chain split between two goes on under the last block, message_builder.hpp).
  const size_t most = std::max<size_t>(writers_[pool].capacity() / 4, 1);
  for (size_t at = 0; at < blocks.size(); at += most)
    stored(pool, blocks.subspan(at, std::min(most, blocks.size() - at)), shm::kEventTierDisk);
}

void EventPublisher::on_disk_removed(uint32_t pool, uint64_t sequence_hash) {
  removed(pool, sequence_hash, shm::kEventTierDisk);
}

void EventPublisher::stored(uint32_t pool, std::span<const pool::StoredBlock> blocks,
                            uint8_t tier_flag) {
  if (blocks.empty()) return;
  const uint64_t t = now_ns(CLOCK_REALTIME);
  scratch_.clear();
  tokens_.clear();
  keys_.clear();
  bool any_tokens = false;
  bool any_keys = false;
  for (const pool::StoredBlock& b : blocks) {
    any_tokens = any_tokens || !b.extras.tokens.empty();
    any_keys = any_keys || !b.extras.key.empty();
    tokens_.push_back(b.extras.tokens);
    keys_.push_back(b.extras.key);
    shm::EventPayload p = payload(shm::EventType::kStored, pool, t);
    p.sequence_hash = b.sequence_hash;
    p.block_hash = b.block_hash;
    p.parent_hash = b.has_parent ? b.parent_hash : 0;
    p.priority = b.priority;
    p.flags = static_cast<uint8_t>((b.has_parent ? shm::kEventHasParent : 0) | tier_flag);
    scratch_.push_back(p);
  }
  // Without tokens or keys the append is the same as before they existed: the area stays
  // untouched.
  using Tokens = std::span<const std::span<const uint32_t>>;
  using Keys = std::span<const std::span<const std::byte>>;
  writers_[pool].append(scratch_, any_tokens ? Tokens(tokens_) : Tokens(),
                        any_keys ? Keys(keys_) : Keys());
}

void EventPublisher::removed(uint32_t pool, uint64_t sequence_hash, uint8_t tier_flag) {
  shm::EventPayload p = payload(shm::EventType::kRemoved, pool, now_ns(CLOCK_REALTIME));
  p.sequence_hash = sequence_hash;
  p.flags = tier_flag;
  writers_[pool].append(p);
}

}  // namespace kvpool::daemon
