#include "tools/kvpool-events/vllm_builder.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace kvpool::events {
namespace {

double now_seconds() {
  // vLLM's ts is time.time(): seconds since the epoch, as a float.
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

const PoolMeta& pool_meta(const std::vector<PoolMeta>& pools, uint32_t i) {
  static const PoolMeta kUnknown{};
  return i < pools.size() ? pools[i] : kUnknown;
}

void VllmBatchBuilder::flush() {
  open_ = Open::kNone;
  if (events_.empty()) return;
  encode_vllm_batch(payload_, encoding_, now_seconds(), events_, dp_rank_, batch_scheme_);
  events_.clear();
  ++stats_.batches;
  if (!sink_(payload_)) in_sync_ = false;
}

void VllmBatchBuilder::begin(uint32_t pool) {
  const HashScheme scheme = pool_meta(pools_, pool).hash_scheme;
  if (!events_.empty() && scheme != batch_scheme_) flush();
  if (events_.size() >= kMaxEventsPerBatch) flush();
  batch_scheme_ = scheme;
}

void VllmBatchBuilder::push(VllmEvent e) { events_.push_back(std::move(e)); }

void VllmBatchBuilder::close_open() { open_ = Open::kNone; }

std::string_view VllmBatchBuilder::medium(uint32_t pool, bool disk) const {
  if (disk) return kMediumDisk;
  return pool_meta(pools_, pool).device ? kMediumGpu : kMediumCpu;
}

std::string VllmBatchBuilder::remember_key(uint32_t pool, uint64_t seq,
                                           std::span<const std::byte> key) {
  if (pool >= keys_.size()) keys_.resize(pool + 1);
  std::string text(reinterpret_cast<const char*>(key.data()), key.size());
  auto [it, fresh] = keys_[pool].try_emplace(seq);
  if (!fresh) key_bytes_ -= it->second.size();  // stored again without a Removed we saw
  if (key_bytes_ + text.size() > max_key_bytes_) {
    keys_[pool].erase(it);
    ++stats_.keys_not_kept;
    return {};
  }
  key_bytes_ += text.size();
  it->second = text;
  return text;
}

std::string VllmBatchBuilder::known_key(uint32_t pool, uint64_t seq) const {
  if (pool >= keys_.size()) return {};
  auto it = keys_[pool].find(seq);
  return it == keys_[pool].end() ? std::string() : it->second;
}

std::string VllmBatchBuilder::forget_key(uint32_t pool, uint64_t seq) {
  if (pool >= keys_.size()) return {};
  auto it = keys_[pool].find(seq);
  if (it == keys_[pool].end()) return {};
  std::string key = std::move(it->second);
  key_bytes_ -= key.size();
  keys_[pool].erase(it);
  return key;
}

void VllmBatchBuilder::stored_block(uint32_t pool, bool disk, uint64_t seq, bool has_parent,
                                    uint64_t parent, std::span<const uint32_t> tokens,
                                    std::span<const std::byte> key) {
  // Keys name host-memory blocks only (the disk tier's records carry none).
  const bool by_key = block_hashes_ == VllmBlockHashes::kKey && !disk;
  std::string name;
  if (by_key && !key.empty()) {
    name = remember_key(pool, seq, key);
  } else if (by_key) {
    forget_key(pool, seq);  // stored by index hash: removed so too
  }
  // Tokens of a whole page or none: consumers split token_ids by block_size.
  if (tokens.size() != pool_meta(pools_, pool).page_size) tokens = {};
  // An event's blocks are a chain: continue the open one only where this block hangs under
  // its last block, and its token ids are there exactly when the event's are.
  const bool continues = open_ == Open::kStored && open_pool_ == pool && open_disk_ == disk &&
                         has_parent && events_.back().block_hashes.back() == signed_hash(parent) &&
                         events_.back().block_hashes.size() < kMaxHashesPerEvent &&
                         events_.back().token_ids.empty() == tokens.empty();
  if (!continues) {
    begin(pool);
    const PoolMeta& meta = pool_meta(pools_, pool);
    VllmEvent e;
    e.kind = VllmEvent::Kind::kStored;
    if (has_parent) e.parent_block_hash = signed_hash(parent);
    if (has_parent && by_key) e.parent_key = known_key(pool, parent);
    e.block_size = meta.page_size;
    e.medium = medium(pool, disk);
    push(std::move(e));
    open_ = Open::kStored;
    open_pool_ = pool;
    open_disk_ = disk;
  }
  events_.back().block_hashes.push_back(signed_hash(seq));
  if (!name.empty()) ++stats_.blocks_with_keys;
  events_.back().block_keys.push_back(std::move(name));
  events_.back().token_ids.insert(events_.back().token_ids.end(), tokens.begin(), tokens.end());
  if (!tokens.empty()) ++stats_.blocks_with_tokens;
  ++stats_.stored_blocks;
}

void VllmBatchBuilder::removed_block(uint32_t pool, bool disk, uint64_t seq) {
  const bool continues = open_ == Open::kRemoved && open_pool_ == pool && open_disk_ == disk &&
                         events_.back().block_hashes.size() < kMaxHashesPerEvent;
  if (!continues) {
    begin(pool);
    VllmEvent e;
    e.kind = VllmEvent::Kind::kRemoved;
    e.medium = medium(pool, disk);
    push(std::move(e));
    open_ = Open::kRemoved;
    open_pool_ = pool;
    open_disk_ = disk;
  }
  // Under the name its Stored gave it.
  std::string name =
      block_hashes_ == VllmBlockHashes::kKey && !disk ? forget_key(pool, seq) : std::string();
  if (!name.empty()) ++stats_.removed_with_keys;
  events_.back().block_hashes.push_back(signed_hash(seq));
  events_.back().block_keys.push_back(std::move(name));
  ++stats_.removed_blocks;
}

void VllmBatchBuilder::add(const shm::EventRecord& r, std::span<const uint32_t> tokens,
                           std::span<const std::byte> key) {
  ++stats_.records;
  const uint32_t pool = r.payload.pool;
  const bool disk = r.disk_tier();
  switch (r.type()) {
    case shm::EventType::kStored:
      if (r.batch_first()) close_open();  // another register call: another BlockStored
      stored_block(pool, disk, r.payload.sequence_hash, r.has_parent(), r.payload.parent_hash,
                   tokens, key);
      if (r.batch_last()) close_open();
      break;
    case shm::EventType::kRemoved:
      removed_block(pool, disk, r.payload.sequence_hash);
      break;
    case shm::EventType::kCleared:
      // vLLM can only clear everything: say so, then the registry again (resync).
      flush();
      in_sync_ = false;
      break;
    default:
      break;  // a record type from a newer daemon: nothing vLLM consumers know about
  }
}

void VllmBatchBuilder::resync(std::span<const RegisteredBlock> blocks) {
  events_.clear();
  open_ = Open::kNone;
  in_sync_ = true;
  // The consumer forgets everything; the registry's blocks go out by index hash.
  for (auto& pool : keys_) pool.clear();
  key_bytes_ = 0;
  VllmEvent cleared;
  cleared.kind = VllmEvent::Kind::kCleared;
  batch_scheme_ = pool_meta(pools_, 0).hash_scheme;
  push(std::move(cleared));
  ++stats_.cleared;

  // Per pool, parents before children (depth first), so each child continues its parent's
  // BlockStored where it can; roots in hash order for a deterministic stream.
  struct Node {
    uint64_t parent;
    bool has_parent;
  };
  // Per pool memory first, then per pool disk tier (each its own medium).
  std::map<std::pair<bool, uint32_t>, std::unordered_map<uint64_t, Node>> by_pool;
  for (const RegisteredBlock& b : blocks)
    by_pool[{b.disk, b.pool}].emplace(b.sequence_hash, Node{b.parent_hash, b.has_parent});
  std::vector<uint64_t> stack;
  for (auto& entry : by_pool) {
    // Named, not a structured binding: the walk below captures them (clang 14 cannot).
    const bool disk = entry.first.first;
    const uint32_t pool = entry.first.second;
    const auto& nodes = entry.second;
    std::unordered_multimap<uint64_t, uint64_t> children;
    std::vector<uint64_t> roots;
    for (const auto& [seq, n] : nodes) {
      if (n.has_parent && n.parent != seq && nodes.count(n.parent)) {
        children.emplace(n.parent, seq);
      } else {
        roots.push_back(seq);
      }
    }
    std::sort(roots.begin(), roots.end());
    std::unordered_set<uint64_t> sent;
    auto walk = [&](uint64_t root) {
      stack.push_back(root);
      while (!stack.empty()) {
        const uint64_t seq = stack.back();
        stack.pop_back();
        if (!sent.insert(seq).second) continue;
        const Node& n = nodes.at(seq);
        stored_block(pool, disk, seq, n.has_parent, n.parent);
        auto [lo, hi] = children.equal_range(seq);
        std::vector<uint64_t> kids;
        for (auto it = lo; it != hi; ++it) kids.push_back(it->second);
        std::sort(kids.rbegin(), kids.rend());  // the smallest is popped next
        for (uint64_t k : kids) stack.push_back(k);
      }
    };
    for (uint64_t r : roots) walk(r);
    // A cycle (only a corrupt snapshot has one) leaves nodes unreached: send them too.
    for (const auto& [seq, n] : nodes)
      if (!sent.count(seq)) walk(seq);
    close_open();
  }
  flush();
}

}  // namespace kvpool::events
