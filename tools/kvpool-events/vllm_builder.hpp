// Turns event-ring records into vLLM KVEventBatches (vllm_event.hpp), the vLLM-format
// forwarder's whole translation, with no ZMQ in it (unit-tested alone):
//
// - Stored: one BlockStored per register call (a ring batch), split where its blocks stop
//   forming one chain (parent_block_hash is the chain's parent), medium of the pool.
// - token_ids: a block's token ids when its client registered with send_tokens and the
//   forwarder read them from the ring in time; empty otherwise, and always empty in a resync
//   (after a lap, a restart, a consumer's request): the registry keeps no token ids.
// - Keys (VllmBlockHashes::kKey): a Stored record's key (a BatchStore block's namespaced key)
//   goes out as bin in block_hashes, and the builder remembers index hash -> key per pool, so
//   that the block's Removed (whose record has no key) names it the same way, and a child's
//   parent_block_hash too. A block is removed under the name its Stored gave it: one stored
//   without its key (lost in the ring, a resync, the memory cap below) is removed by index
//   hash. A resync forgets every key (the consumer forgets everything: the registry keeps no
//   keys, and its BlockStored events carry index hashes). Memory: one entry per registered
//   keyed block (a pool's registry bounds them), kMaxKeyBytes of keys at most. Disk-tier
//   records carry no keys: medium "DISK" names every block by index hash.
// - Removed: consecutive removals of one pool go out as one BlockRemoved.
// - A pool's Cleared record: vLLM's only clear is AllBlocksCleared (every medium), so the
//   builder asks for a resync (in_sync() false) and the forwarder sends AllBlocksCleared and
//   the whole registry again.
// - Pools are not merged: a hash held by a host and a device pool is stored twice, once per
//   medium, as vLLM reports its tiers. A pool's disk tier (records flagged kEventTierDisk) is
//   medium "DISK": a block written behind is stored again there, and removed there alone.
// - A batch goes out when the ring runs dry (flush()), when it holds kMaxEventsPerBatch
//   events, and before an event from a pool of another hash scheme (a batch names one).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvpool/shm/event_ring.hpp"
#include "tools/kvpool-events/message_builder.hpp"
#include "tools/kvpool-events/pool_meta.hpp"
#include "tools/kvpool-events/vllm_event.hpp"

namespace kvpool::events {

struct VllmBuilderStats {
  uint64_t records = 0;
  uint64_t batches = 0;
  uint64_t stored_blocks = 0;
  uint64_t blocks_with_tokens = 0;  // of which sent with their token ids
  uint64_t blocks_with_keys = 0;    // of which named by their key (kKey)
  uint64_t removed_with_keys = 0;   // removed blocks named by their key
  uint64_t keys_not_kept = 0;       // keys sent as index hashes: kMaxKeyBytes reached
  uint64_t removed_blocks = 0;
  uint64_t cleared = 0;
};

class VllmBatchBuilder {
 public:
  static constexpr size_t kMaxEventsPerBatch = 256;
  static constexpr size_t kMaxHashesPerEvent = 512;
  // Key bytes the builder remembers for Removed events at most (kKey).
  static constexpr uint64_t kMaxKeyBytes = uint64_t{64} << 20;
  // Called with each encoded KVEventBatch. Returns false when it could not be sent.
  using Sink = std::function<bool(std::string_view payload)>;

  VllmBatchBuilder(VllmEncoding encoding, int64_t dp_rank, Sink sink,
                   VllmBlockHashes block_hashes = VllmBlockHashes::kIndex)
      : encoding_(encoding),
        dp_rank_(dp_rank),
        block_hashes_(block_hashes),
        sink_(std::move(sink)) {}

  // The daemon's pools (index = the ring's pool field). Call on every attach. The keys
  // remembered stay: a daemon that took over its predecessor's registry whole needs no
  // resync (forwarder.hpp), and one that did not is resynced, which forgets them.
  void set_pools(std::vector<PoolMeta> pools) {
    pools_ = std::move(pools);
    if (keys_.size() < pools_.size()) keys_.resize(pools_.size());
  }

  // Feeds the next ring record (in event id order, without gaps; after a gap call resync()).
  // `tokens`: a Stored record's token ids (a page of them), or empty. A BlockStored carries
  // the token ids of all its blocks or of none: a block whose tokens differ in that from the
  // open event's starts another BlockStored (its parent the previous block).
  // `key`: a Stored record's key (read_key), or empty.
  void add(const shm::EventRecord& record, std::span<const uint32_t> tokens = {},
           std::span<const std::byte> key = {});
  // Caps the key bytes kept for Removed events (kMaxKeyBytes by default).
  void set_key_memory(uint64_t bytes) { max_key_bytes_ = bytes; }
  // Sends the batch being built (call when the ring has nothing more for now).
  void flush();
  // Drops what is pending, sends AllBlocksCleared, then `blocks` as BlockStored chains.
  void resync(std::span<const RegisteredBlock> blocks);

  // False once a batch could not be sent, or a pool was cleared, since the last resync().
  bool in_sync() const { return in_sync_; }
  const VllmBuilderStats& stats() const { return stats_; }

 private:
  void begin(uint32_t pool);  // flushes first when `pool` has another scheme than the batch
  void push(VllmEvent e);
  void stored_block(uint32_t pool, bool disk, uint64_t seq, bool has_parent, uint64_t parent,
                    std::span<const uint32_t> tokens = {}, std::span<const std::byte> key = {});
  void removed_block(uint32_t pool, bool disk, uint64_t seq);
  // kKey: remembers `key` as block `seq`'s name and returns it (empty over kMaxKeyBytes).
  std::string remember_key(uint32_t pool, uint64_t seq, std::span<const std::byte> key);
  // The name block `seq` was stored under ("" for its index hash); forget() also drops it.
  std::string known_key(uint32_t pool, uint64_t seq) const;
  std::string forget_key(uint32_t pool, uint64_t seq);
  std::string_view medium(uint32_t pool, bool disk) const;
  void close_open();

  VllmEncoding encoding_;
  int64_t dp_rank_;
  VllmBlockHashes block_hashes_;
  Sink sink_;
  // kKey: per pool, index hash -> key of the keyed blocks stored by key and not yet removed.
  std::vector<std::unordered_map<uint64_t, std::string>> keys_;
  uint64_t key_bytes_ = 0;  // of all of keys_
  uint64_t max_key_bytes_ = kMaxKeyBytes;
  std::vector<PoolMeta> pools_;
  bool in_sync_ = true;
  VllmBuilderStats stats_;
  std::vector<VllmEvent> events_;  // the batch being built
  HashScheme batch_scheme_ = HashScheme::kDynamo02;
  // The event being filled (the back of events_), or none.
  enum class Open { kNone, kStored, kRemoved } open_ = Open::kNone;
  uint32_t open_pool_ = 0;
  bool open_disk_ = false;
  std::string payload_;  // reused buffer
};

}  // namespace kvpool::events
