// The disk tier's Stored / Removed (docs/disk-tier.md "Events"): what a router needs to
// know what this worker can serve from disk. Stored only once a slot is published (its
// write durable), Removed as soon as a slot leaves the index, before it is written again.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "daemon/disk/disk_tier.hpp"

namespace kvpool::daemon::disk {
namespace {

pool::StoredBlock stored_of(const SlotHeader& h) {
  pool::StoredBlock b{};
  b.sequence_hash = h.sequence_hash;
  b.block_hash = h.block_hash;
  b.parent_hash = h.parent_hash;
  b.has_parent = h.has_parent != 0;
  b.priority = h.priority;
  return b;
}

// `blocks` reordered so that a parent present in it comes before its children (a router
// drops a stored chain whose parent it does not know); otherwise in the order given.
void parents_first(std::vector<pool::StoredBlock>& blocks) {
  std::unordered_map<uint64_t, size_t> at;
  for (size_t i = 0; i < blocks.size(); ++i) at.emplace(blocks[i].sequence_hash, i);
  std::vector<pool::StoredBlock> out;
  out.reserve(blocks.size());
  std::unordered_set<uint64_t> done;
  std::vector<size_t> path;
  for (size_t i = 0; i < blocks.size(); ++i) {
    // Walk up to the oldest ancestor not yet emitted, then emit down again.
    path.clear();
    for (size_t c = i; done.count(blocks[c].sequence_hash) == 0;) {
      path.push_back(c);
      done.insert(blocks[c].sequence_hash);  // also ends a (corrupt) cycle
      if (!blocks[c].has_parent) break;
      auto it = at.find(blocks[c].parent_hash);
      if (it == at.end()) break;
      c = it->second;
    }
    for (size_t k = path.size(); k-- > 0;) out.push_back(blocks[path[k]]);
  }
  blocks = std::move(out);
}

}  // namespace

void DiskTier::note_on_disk(const SlotHeader& h) { newly_on_disk_.push_back(stored_of(h)); }

void DiskTier::announce_stored() {
  if (newly_on_disk_.empty()) return;
  if (setup_.events != nullptr) setup_.events->on_disk_stored(setup_.pool_index, newly_on_disk_);
  newly_on_disk_.clear();
}

void DiskTier::announce_removed(uint64_t sequence_hash) {
  announce_stored();  // a hash published and removed in one round: Stored first
  if (setup_.events != nullptr) setup_.events->on_disk_removed(setup_.pool_index, sequence_hash);
}

void DiskTier::announce_index() {
  if (setup_.events == nullptr || index_.used() == 0) return;
  std::vector<pool::StoredBlock> all;
  all.reserve(index_.used());
  for (uint64_t h : index_.lru_order()) all.push_back(stored_of(index_.at(index_.find(h)).header));
  parents_first(all);
  setup_.events->on_disk_stored(setup_.pool_index, all);
}

}  // namespace kvpool::daemon::disk
