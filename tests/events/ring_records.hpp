// Event-ring records as kvpoold's publisher writes them, for the translation tests.
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "kvpool/shm/event_ring.hpp"

namespace kvpool::events {

// Ring records as the daemon's publisher writes them. `disk`: of the pool's disk tier
// (kEventTierDisk), as its disk tier's write-behind and evictions write them.
class Records {
 public:
  std::vector<shm::EventRecord> stored(
      uint32_t pool, std::vector<std::tuple<uint64_t, uint64_t, std::optional<uint64_t>>> blocks,
      bool disk = false) {
    std::vector<shm::EventRecord> out;
    const uint64_t first = next_;
    for (size_t i = 0; i < blocks.size(); ++i) {
      shm::EventRecord r{};
      r.event_id = next_++;
      auto [seq, block, parent] = blocks[i];
      r.payload.type = static_cast<uint8_t>(shm::EventType::kStored);
      r.payload.pool = static_cast<uint16_t>(pool);
      r.payload.sequence_hash = seq;
      r.payload.block_hash = block;
      r.payload.parent_hash = parent.value_or(0);
      r.payload.flags = parent ? shm::kEventHasParent : 0;
      if (disk) r.payload.flags |= shm::kEventTierDisk;
      if (i == 0) r.payload.flags |= shm::kEventBatchFirst;
      if (i + 1 == blocks.size()) r.payload.flags |= shm::kEventBatchLast;
      r.payload.batch_id = first;
      r.payload.batch_size = static_cast<uint32_t>(blocks.size());
      out.push_back(r);
    }
    return out;
  }
  shm::EventRecord single(shm::EventType type, uint32_t pool, uint64_t seq = 0, bool disk = false) {
    shm::EventRecord r{};
    r.event_id = next_++;
    r.payload.type = static_cast<uint8_t>(type);
    r.payload.pool = static_cast<uint16_t>(pool);
    r.payload.sequence_hash = seq;
    r.payload.flags = shm::kEventBatchFirst | shm::kEventBatchLast;
    if (disk) r.payload.flags |= shm::kEventTierDisk;
    r.payload.batch_id = r.event_id;
    r.payload.batch_size = 1;
    return r;
  }

 private:
  uint64_t next_ = 1;
};

}  // namespace kvpool::events
