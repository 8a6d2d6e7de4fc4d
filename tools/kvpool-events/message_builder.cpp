#include "tools/kvpool-events/message_builder.hpp"

#include <algorithm>
#include <unordered_set>

namespace kvpool::events {
namespace {

constexpr uint64_t kMemoryBits = 0xFFFFFFFFull;
constexpr uint64_t kDiskBits = kMemoryBits << 32;

uint64_t pool_bit(uint32_t pool, bool disk) {
  return uint64_t{1} << (std::min<uint32_t>(pool, 31) + (disk ? 32 : 0));
}

}  // namespace

EventSource MessageBuilder::source(uint32_t pool, bool disk) const {
  if (!full_envelope_) return EventSource(identity_.worker_id);
  const PoolMeta& meta = pool_meta(pools_, pool);
  EventSource src(identity_.worker_id);
  src.dp_rank = identity_.dp_rank;
  src.storage_tier = disk ? kTierDisk : meta.device ? kTierDevice : kTierHostPinned;
  // Without a CacheOwnerId Dynamo refuses cache_owner events: speak as the worker then. A
  // disk tier belongs to a host pool and speaks as its pool does.
  const bool owner = !meta.device && identity_.cache_owner && identity_.state_source.is_object();
  src.residency_domain = owner ? kDomainCacheOwner : kDomainWorker;
  if (owner) src.state_source = &identity_.state_source;
  src.hash_scheme = hash_scheme_name(meta.hash_scheme);
  return src;
}

uint64_t MessageBuilder::tier_mask(uint32_t pool, bool disk) const {
  // Every disk tier of the worker is one "disk" cache to the router.
  if (disk) return kDiskBits;
  // Dynamo 0.2.1's envelope has no tier: every pool is one cache to that router, as before.
  if (!full_envelope_ || pools_.empty()) return kMemoryBits;
  const bool device = pool_meta(pools_, pool).device;
  uint64_t mask = 0;
  for (uint32_t i = 0; i < pools_.size(); ++i)
    if (pools_[i].device == device) mask |= pool_bit(i, false);
  // Pools the table lacks are host pools (pool_meta's default).
  if (!device && pools_.size() < 32) mask |= kMemoryBits & ~((uint64_t{1} << pools_.size()) - 1);
  return mask;
}

void MessageBuilder::send_cleared() {
  // One "cleared" per residency domain in use: a cache_owner clear leaves the worker's own
  // domain alone and the other way round.
  bool host = pools_.empty(), device = false;
  for (const PoolMeta& m : pools_) (m.device ? device : host) = true;
  auto once = [&](uint32_t like_pool) {
    json_.clear();
    append_cleared_json(json_, source(like_pool), next_event_id_);
    ++stats_.cleared;
    send(json_);
  };
  if (!full_envelope_) {
    once(0);
    return;
  }
  uint32_t first_host = 0, first_device = 0;
  for (uint32_t i = pools_.size(); i-- > 0;) (pools_[i].device ? first_device : first_host) = i;
  if (host) once(first_host);
  // A device pool speaks as "worker"; so does a host pool when the identity says so (then
  // the clear above already was the worker's).
  if (device && identity_.cache_owner) once(first_device);
  // A router that keeps tiers apart may clear one tier at a time: the disk tier is told too.
  for (uint32_t i = 0; i < pools_.size(); ++i) {
    if (!pools_[i].disk) continue;
    json_.clear();
    append_cleared_json(json_, source(i, true), next_event_id_);
    ++stats_.cleared;
    send(json_);
    break;
  }
}

void MessageBuilder::send(const std::string& json) {
  ++next_event_id_;
  ++stats_.messages;
  if (!sink_(json)) in_sync_ = false;
}

void MessageBuilder::send_stored() {
  if (stored_.empty()) return;
  json_.clear();
  append_stored_json(json_, source(stored_pool_, stored_disk_), next_event_id_, stored_parent_,
                     stored_);
  stats_.stored_blocks += stored_.size();
  stored_.clear();
  stored_parent_.reset();
  send(json_);
}

void MessageBuilder::send_removed() {
  if (removed_.empty()) return;
  json_.clear();
  append_removed_json(json_, source(removed_pool_, removed_disk_), next_event_id_, removed_);
  stats_.removed_blocks += removed_.size();
  removed_.clear();
  send(json_);
}

void MessageBuilder::stored_block(uint32_t pool, bool disk, uint64_t seq, uint64_t block,
                                  bool has_parent, uint64_t parent) {
  uint64_t& mask = pools_of_[seq];
  const bool known = (mask & tier_mask(pool, disk)) != 0;
  mask |= pool_bit(pool, disk);
  if (known) return;  // another pool of the tier already told the router
  // A message's blocks are a chain of one tier: start another one where this block does not
  // continue it.
  const bool continues = !stored_.empty() && has_parent && parent == stored_.back().block_hash &&
                         (tier_mask(stored_pool_, stored_disk_) & pool_bit(pool, disk)) != 0;
  if (!continues || stored_.size() >= kMaxBlocksPerMessage) {
    // A full message splits a chain: the next message hangs under its last block.
    const bool split_chain = continues;
    const uint64_t last = stored_.empty() ? 0 : stored_.back().block_hash;
    send_stored();
    if (split_chain) {
      stored_parent_ = last;
    } else if (has_parent) {
      stored_parent_ = parent;
    }
  }
  stored_pool_ = pool;
  stored_disk_ = disk;
  stored_.push_back({seq, block});
}

void MessageBuilder::removed_block(uint32_t pool, bool disk, uint64_t seq) {
  auto it = pools_of_.find(seq);
  if (it == pools_of_.end()) return;  // never told (removed before a resync's snapshot)
  const uint64_t bit = pool_bit(pool, disk);
  if ((it->second & bit) == 0) return;
  it->second &= ~bit;
  // Another pool of the tier still holds it.
  if ((it->second & tier_mask(pool, disk)) != 0) return;
  if (it->second == 0) pools_of_.erase(it);
  // A message's removals are of one tier.
  if (!removed_.empty() && (tier_mask(removed_pool_, removed_disk_) & bit) == 0) send_removed();
  removed_pool_ = pool;
  removed_disk_ = disk;
  removed_.push_back(seq);
  if (removed_.size() >= kMaxRemovedPerMessage) send_removed();
}

void MessageBuilder::add(const shm::EventRecord& r) {
  ++stats_.records;
  const uint32_t pool = r.payload.pool;
  const bool disk = r.disk_tier();
  // Dynamo 0.2.1's envelope cannot say "disk": its router would take these for memory.
  if (disk && !full_envelope_) return;
  switch (r.type()) {
    case shm::EventType::kStored:
      send_removed();
      if (r.batch_first()) send_stored();  // a batch cut short by a lap: send what came
      stored_block(pool, disk, r.payload.sequence_hash, r.payload.block_hash, r.has_parent(),
                   r.payload.parent_hash);
      if (r.batch_last()) send_stored();
      break;
    case shm::EventType::kRemoved:
      send_stored();
      removed_block(pool, disk, r.payload.sequence_hash);
      break;
    case shm::EventType::kCleared: {
      send_stored();
      send_removed();
      removed_pool_ = pool;
      removed_disk_ = false;
      const uint64_t bit = pool_bit(pool, false);
      const uint64_t tier = tier_mask(pool, false);
      for (auto it = pools_of_.begin(); it != pools_of_.end();) {
        if ((it->second & bit) == 0) {
          ++it;
          continue;
        }
        it->second &= ~bit;
        if ((it->second & tier) == 0) removed_.push_back(it->first);
        if (it->second == 0) {
          it = pools_of_.erase(it);
        } else {
          ++it;
        }
      }
      if (pools_of_.empty()) {
        // Nothing left anywhere: "cleared" says it all.
        removed_.clear();
        send_cleared();
      } else {
        while (!removed_.empty()) {
          const size_t n = std::min(removed_.size(), kMaxRemovedPerMessage);
          std::vector<uint64_t> rest(removed_.begin() + static_cast<long>(n), removed_.end());
          removed_.resize(n);
          send_removed();
          removed_ = std::move(rest);
        }
      }
      break;
    }
    default:
      break;  // a record type from a newer daemon: nothing a router knows about
  }
}

void MessageBuilder::flush() {
  send_stored();
  send_removed();
}

void MessageBuilder::resync(std::span<const RegisteredBlock> blocks) {
  stored_.clear();
  stored_parent_.reset();
  removed_.clear();
  pools_of_.clear();
  in_sync_ = true;
  ++stats_.resyncs;
  send_cleared();
  // Each storage tier is its own cache to the router: host pools' chains, then device's,
  // then the disk tiers' (none in Dynamo 0.2.1's envelope, which has no tier).
  enum class Tier { kHost, kDevice, kDisk };
  for (const Tier t : {Tier::kHost, Tier::kDevice, Tier::kDisk}) {
    if (t == Tier::kDisk && !full_envelope_) break;
    std::vector<RegisteredBlock> tier;
    for (const RegisteredBlock& b : blocks) {
      const Tier of = b.disk                             ? Tier::kDisk
                      : pool_meta(pools_, b.pool).device ? Tier::kDevice
                                                         : Tier::kHost;
      if (of == t) tier.push_back(b);
    }
    if (!tier.empty()) resync_tier(tier);
  }
}

void MessageBuilder::resync_tier(std::span<const RegisteredBlock> blocks) {
  // One entry per hash (several pools may hold it), then chains: parents before children,
  // each child continuing its parent's message where it can.
  struct Node {
    uint64_t block_hash;
    uint64_t parent;
    uint32_t pool;  // one of the pools holding it: the message's tier
    bool has_parent;
    bool disk;
  };
  std::unordered_map<uint64_t, Node> nodes;
  nodes.reserve(blocks.size());
  for (const RegisteredBlock& b : blocks) {
    pools_of_[b.sequence_hash] |= pool_bit(b.pool, b.disk);
    nodes.emplace(b.sequence_hash, Node{b.block_hash, b.parent_hash, b.pool, b.has_parent, b.disk});
  }
  std::unordered_multimap<uint64_t, uint64_t> children;  // parent -> child
  std::vector<uint64_t> roots;
  for (const auto& [seq, n] : nodes) {
    if (n.has_parent && n.parent != seq && nodes.count(n.parent)) {
      children.emplace(n.parent, seq);
    } else {
      roots.push_back(seq);
    }
  }
  std::sort(roots.begin(), roots.end());  // deterministic output
  std::unordered_set<uint64_t> sent;
  sent.reserve(nodes.size());
  std::vector<uint64_t> stack;
  auto walk = [&](uint64_t root) {
    stack.push_back(root);
    while (!stack.empty()) {
      const uint64_t seq = stack.back();
      stack.pop_back();
      if (!sent.insert(seq).second) continue;
      const Node& n = nodes.at(seq);
      // Reuses the live path's chain logic; the pool mask is already set, so bypass it.
      const bool continues =
          !stored_.empty() && n.has_parent && n.parent == stored_.back().block_hash;
      if (!continues || stored_.size() >= kMaxBlocksPerMessage) {
        const uint64_t last = stored_.empty() ? 0 : stored_.back().block_hash;
        send_stored();
        if (continues) {
          stored_parent_ = last;
        } else if (n.has_parent) {
          stored_parent_ = n.parent;
        }
      }
      stored_pool_ = n.pool;
      stored_disk_ = n.disk;
      stored_.push_back({seq, n.block_hash});
      // Depth first; the first child is popped next and so continues this chain.
      auto [lo, hi] = children.equal_range(seq);
      std::vector<uint64_t> kids;
      for (auto it = lo; it != hi; ++it) kids.push_back(it->second);
      std::sort(kids.rbegin(), kids.rend());
      for (uint64_t k : kids) stack.push_back(k);
    }
  };
  for (uint64_t r : roots) walk(r);
  // A cycle (only a corrupt snapshot has one) leaves nodes unreached: send them too.
  for (const auto& [seq, n] : nodes)
    if (!sent.count(seq)) walk(seq);
  send_stored();
}

}  // namespace kvpool::events
