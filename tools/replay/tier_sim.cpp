#include "tier_sim.hpp"

#include <list>
#include <queue>
#include <unordered_map>

namespace kvpool::replay {
namespace {

// Host memory: registered blocks with reference counts; unreferenced ones in an LRU list
// (returned order), evicted from its front. Free blocks are capacity - cached.
class HostTier {
 public:
  explicit HostTier(uint64_t capacity) : cap_(capacity) {}

  bool cached(uint64_t id) const { return blocks_.count(id) != 0; }
  // Longest cached prefix from `from`; each hit takes a reference.
  size_t match(const std::vector<uint64_t>& ids) {
    size_t n = 0;
    while (n < ids.size() && cached(ids[n])) take(blocks_.at(ids[n++]));
    return n;
  }
  uint64_t available() const { return cap_ - blocks_.size() + inactive_; }
  // Registers ids[k] (k in [from, to)) into host memory; the caller checked available().
  // Returns the ids newly stored (the write-behind's input).
  std::vector<uint64_t> insert(const std::vector<uint64_t>& ids, size_t from, size_t to) {
    std::vector<uint64_t> stored;
    while (cap_ - blocks_.size() < to - from) evict_one();
    for (size_t k = from; k < to; ++k) {
      if (auto it = blocks_.find(ids[k]); it != blocks_.end()) {
        take(it->second);  // still cached past a miss: deduplicated, as PoolCore does
        continue;
      }
      blocks_[ids[k]].refs = 1;
      stored.push_back(ids[k]);
    }
    return stored;
  }
  // Last first, as PoolCore::release_immutable does with a batch.
  void release(const std::vector<uint64_t>& ids) {
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
      Entry& e = blocks_.at(*it);
      if (--e.refs == 0) {
        ++inactive_;
        lru_.push_back(*it);
        e.pos = std::prev(lru_.end());
      }
    }
  }
  uint64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    uint32_t refs = 0;
    std::list<uint64_t>::iterator pos;
  };
  void take(Entry& e) {
    if (e.refs++ == 0) {
      --inactive_;
      lru_.erase(e.pos);
    }
  }
  void evict_one() {
    blocks_.erase(lru_.front());
    lru_.pop_front();
    --inactive_;
    ++evictions_;
  }

  uint64_t cap_;
  uint64_t inactive_ = 0, evictions_ = 0;
  std::unordered_map<uint64_t, Entry> blocks_;
  std::list<uint64_t> lru_;
};

// The disk tier: an LRU over slots, touched at write and read.
class DiskTierModel {
 public:
  explicit DiskTierModel(uint64_t slots) : slots_(slots) {}
  bool has(uint64_t id) const { return where_.count(id) != 0; }
  void touch(uint64_t id) { order_.splice(order_.end(), order_, where_.at(id)); }
  void write(uint64_t id) {
    if (slots_ == 0 || has(id)) return;
    if (where_.size() == slots_) {
      where_.erase(order_.front());
      order_.pop_front();
      ++evictions_;
    }
    order_.push_back(id);
    where_[id] = std::prev(order_.end());
    ++writes_;
  }
  uint64_t evictions() const { return evictions_; }
  uint64_t writes() const { return writes_; }

 private:
  uint64_t slots_;
  std::list<uint64_t> order_;
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;
  uint64_t evictions_ = 0, writes_ = 0;
};

struct Hold {
  double until_ms;
  uint64_t order;
  std::vector<uint64_t> ids;
  bool operator>(const Hold& o) const {
    return until_ms != o.until_ms ? until_ms > o.until_ms : order > o.order;
  }
};

}  // namespace

Result<TierSimResult> simulate_tiers(const std::vector<TraceRequest>& requests,
                                     const SimOptions& options, uint64_t disk_blocks) {
  if (options.shallow_levels != 0)
    return Status(ErrorCode::kInvalidArgument,
                  "the two-tier model has one priority (--shallow-levels 0)");
  HostTier host(options.capacity);
  DiskTierModel disk(disk_blocks);
  TierSimResult out;
  std::priority_queue<Hold, std::vector<Hold>, std::greater<>> holds;
  uint64_t order = 0;
  auto release_until = [&](double t) {
    while (!holds.empty() && holds.top().until_ms <= t) {
      host.release(holds.top().ids);
      holds.pop();
    }
  };
  for (const auto& r : requests) {
    const double t = static_cast<double>(r.timestamp_ms);
    release_until(t);
    out.prompt_blocks += r.ids.size();
    const size_t in_host = host.match(r.ids);
    size_t on_disk = in_host;
    while (on_disk < r.ids.size() && disk.has(r.ids[on_disk])) ++on_disk;
    std::vector<uint64_t> held(r.ids.begin(), r.ids.begin() + in_host);
    // Onboard and the new blocks need host blocks together (all or nothing, as allocate).
    if (in_host < r.ids.size()) {
      if (host.available() >= r.ids.size() - in_host) {
        for (uint64_t id : host.insert(r.ids, in_host, r.ids.size())) disk.write(id);
        for (size_t k = in_host; k < on_disk; ++k) disk.touch(r.ids[k]);  // read: touched
        out.disk_hits += on_disk - in_host;
        held = r.ids;
      } else {
        ++out.uncached_requests;
      }
    }
    out.host_hits += in_host;
    holds.push(Hold{t + r.output_length * options.token_ms, order++, std::move(held)});
  }
  release_until(1e300);
  out.host_evictions = host.evictions();
  out.disk_evictions = disk.evictions();
  out.disk_writes = disk.writes();
  return out;
}

}  // namespace kvpool::replay
