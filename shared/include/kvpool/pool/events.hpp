// What the pool core tells the outside world about registry changes. The daemon turns these
// into records of its event ring (and, through the forwarder, NATS messages in Dynamo's
// router format); in-process users and tests receive them directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvpool::pool {

// What a register call carries for one block besides its item, for the Stored event only:
// its token ids and its opaque key (a BatchStore's namespaced key), each empty when the
// client sent none. Valid during the call only: they point into the request.
struct BlockExtras {
  std::span<const uint32_t> tokens;
  std::span<const std::byte> key;
};

struct StoredBlock {
  uint64_t sequence_hash;  // Dynamo router: "block_hash"
  uint64_t block_hash;     // Dynamo router: "tokens_hash"
  uint64_t parent_hash;    // valid when has_parent
  uint32_t priority;
  bool has_parent;
  BlockExtras extras = {};
};

// The token ids and keys a register call carries (kRegisterTokens): per_block token ids per
// item, item i's at all[i * per_block]; item i's key is keys[key_ends[i-1] .. key_ends[i])
// (key_ends empty: no keys). Default: none.
struct RegisterExtras {
  std::span<const uint32_t> all;
  uint32_t per_block = 0;
  std::span<const std::byte> keys;
  std::span<const uint64_t> key_ends;

  BlockExtras of(size_t item) const {
    BlockExtras e;
    if (per_block != 0 && (item + 1) * per_block <= all.size())
      e.tokens = all.subspan(item * per_block, per_block);
    if (item < key_ends.size()) {
      const uint64_t begin = item == 0 ? 0 : key_ends[item - 1];
      if (begin <= key_ends[item] && key_ends[item] <= keys.size())
        e.key = keys.subspan(begin, key_ends[item] - begin);
    }
    return e;
  }
};
// PoolCore::register_blocks's parameter type (its name from before keys).
using RegisterTokens = RegisterExtras;

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
