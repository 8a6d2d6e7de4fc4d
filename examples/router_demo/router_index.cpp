#include "examples/router_demo/router_index.hpp"

namespace kvpool::events {

void RouterIndex::apply(const RouterEvent& e) {
  auto& blocks = workers_[e.worker_id];  // a worker is known from its first event on
  switch (e.kind) {
    case RouterEvent::Kind::kStored:
      for (const StoredHashes& b : e.blocks) total_ += blocks.insert(b.block_hash).second;
      break;
    case RouterEvent::Kind::kRemoved:
      for (uint64_t h : e.block_hashes) total_ -= blocks.erase(h);
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

}  // namespace kvpool::events
