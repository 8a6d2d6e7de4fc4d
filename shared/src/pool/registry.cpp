#include "kvpool/pool/registry.hpp"

namespace kvpool::pool {

void Registry::insert(uint64_t sequence_hash, uint32_t id) {
  table_.insert(sequence_hash, id);
  ++header_->registered;
}

void Registry::remove(uint64_t sequence_hash) {
  table_.erase(sequence_hash);
  --header_->registered;
  if (sink_) sink_->on_removed(pool_index_, sequence_hash);
}

void Registry::publish_stored(std::span<const StoredBlock> blocks) const {
  if (sink_ && !blocks.empty()) sink_->on_stored(pool_index_, blocks);
}

}  // namespace kvpool::pool
