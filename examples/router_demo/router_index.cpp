#include "examples/router_demo/router_index.hpp"

namespace kvpool::events {

uint8_t RouterIndex::tier_bit(std::string_view tier) {
  if (tier == kTierDevice) return 1;
  if (tier == kTierDisk) return 4;
  if (tier == kTierHostPinned || tier.empty()) return 2;
  return 8;  // a tier this demo does not name ("external")
}

void RouterIndex::apply(const RouterEvent& e) {
  auto& blocks = workers_[e.worker_id];  // a worker is known from its first event on
  const uint8_t bit = tier_bit(e.storage_tier);
  switch (e.kind) {
    case RouterEvent::Kind::kStored:
      for (const StoredHashes& b : e.blocks) {
        uint8_t& tiers = blocks[b.block_hash];
        total_ += tiers == 0;
        tiers |= bit;
      }
      break;
    case RouterEvent::Kind::kRemoved:
      for (uint64_t h : e.block_hashes) {
        auto it = blocks.find(h);
        if (it == blocks.end()) continue;
        it->second &= static_cast<uint8_t>(~bit);
        if (it->second != 0) continue;
        blocks.erase(it);
        --total_;
      }
      break;
    case RouterEvent::Kind::kCleared:
      total_ -= blocks.size();
      blocks.clear();
      break;
  }
}

std::map<int64_t, uint32_t> RouterIndex::overlaps(std::span<const uint64_t> hashes) const {
  std::map<int64_t, uint32_t> out;
  for (const auto& [worker, blocks] : workers_) {
    uint32_t n = 0;
    while (n < hashes.size() && blocks.count(hashes[n])) ++n;
    out[worker] = n;
  }
  return out;
}

std::map<int64_t, size_t> RouterIndex::sizes() const {
  std::map<int64_t, size_t> out;
  for (const auto& [worker, blocks] : workers_) out[worker] = blocks.size();
  return out;
}

bool RouterIndex::holds(int64_t worker, uint64_t sequence_hash) const {
  auto it = workers_.find(worker);
  return it != workers_.end() && it->second.count(sequence_hash) != 0;
}

bool RouterIndex::holds_in(int64_t worker, uint64_t sequence_hash,
                           std::string_view storage_tier) const {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return false;
  auto b = it->second.find(sequence_hash);
  return b != it->second.end() && (b->second & tier_bit(storage_tier)) != 0;
}

}  // namespace kvpool::events
