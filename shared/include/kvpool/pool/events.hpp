// What the pool core tells the outside world about registry changes. The daemon turns these
// into records of its event ring (and, through the forwarder, NATS messages in Dynamo's
// router format); in-process users and tests receive them directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvpool::pool {

struct StoredBlock {
  uint64_t sequence_hash;  // Dynamo router: "block_hash"
  uint64_t block_hash;     // Dynamo router: "tokens_hash"
  uint64_t parent_hash;    // valid when has_parent
  uint32_t priority;
  bool has_parent;
  // The block's token ids when the registering client sent them (valid during the call
  // only: they point into the request); empty otherwise.
  std::span<const uint32_t> tokens = {};
};

// The token ids a register call carries (kRegisterTokens): per_block of them per item, item
// i's at all[i * per_block]. Default: none.
struct RegisterTokens {
  std::span<const uint32_t> all;
  uint32_t per_block = 0;

  std::span<const uint32_t> of(size_t item) const {
    if (per_block == 0 || (item + 1) * per_block > all.size()) return {};
    return all.subspan(item * per_block, per_block);
  }
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  // One call per register call that registered at least one new block (deduplicated
  // blocks are not stored again).
  virtual void on_stored(uint32_t pool, std::span<const StoredBlock> blocks) = 0;
  // One call per registration that ends (eviction).
  virtual void on_removed(uint32_t pool, uint64_t sequence_hash) = 0;
  // No on_cleared: the pool core never empties its registry at once (a restart that starts
  // a pool empty is a new daemon epoch, which readers resync on). The ring keeps the
  // kCleared record type for readers of other writers.
};

}  // namespace kvpool::pool
