// What the pool core tells the outside world about registry changes. The daemon turns these
// into records of its event ring (and, through the forwarder, NATS messages in Dynamo's
// router format); in-process users and tests receive them directly.
#pragma once

#include <cstdint>
#include <span>

namespace kvpool::pool {

struct StoredBlock {
  uint64_t sequence_hash;  // Dynamo router: "block_hash"
  uint64_t block_hash;     // Dynamo router: "tokens_hash"
  uint64_t parent_hash;    // valid when has_parent
  uint32_t priority;
  bool has_parent;
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  // One call per register call that registered at least one new block (deduplicated
  // blocks are not stored again).
  virtual void on_stored(uint32_t pool, std::span<const StoredBlock> blocks) = 0;
  // One call per registration that ends (eviction).
  virtual void on_removed(uint32_t pool, uint64_t sequence_hash) = 0;
  // The pool's registry was emptied.
  virtual void on_cleared(uint32_t pool) = 0;
};

}  // namespace kvpool::pool
