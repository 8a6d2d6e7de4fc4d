#include "policy_sim.hpp"

#include <algorithm>
#include <deque>
#include <list>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace kvpool::replay {

namespace {

struct Entry {
  uint32_t refs = 0;
  uint32_t freq = 0;
  std::list<uint64_t>::iterator lru_pos;  // lru: position in the inactive list
  bool in_lru = false;
};

class Model {
 public:
  Model(uint32_t capacity, bool s3fifo) : cap_(capacity), s3_(s3fifo) {}

  uint32_t match(const std::vector<uint64_t>& ids) {
    uint32_t n = 0;
    for (uint64_t id : ids) {
      auto it = cached_.find(id);
      if (it == cached_.end()) break;
      take(id, it->second);
      it->second.freq = std::min<uint32_t>(it->second.freq + 1, 3);
      ++n;
    }
    return n;
  }
  // All or nothing, like PoolCore::allocate: free + inactive must cover `n`.
  bool insert(const std::vector<uint64_t>& ids, size_t from) {
    const uint64_t n = ids.size() - from;
    if (n > uint64_t{cap_} - cached_.size() + inactive_) return false;
    while (cap_ - cached_.size() < n) evict_one();
    for (size_t k = from; k < ids.size(); ++k) {
      // Still cached past the first miss (its parent was evicted): register deduplicates onto
      // it, as PoolCore does, and the block allocated for it goes back to the free list.
      if (auto it = cached_.find(ids[k]); it != cached_.end()) {
        take(ids[k], it->second);
        continue;
      }
      Entry& e = cached_[ids[k]];
      e.refs = 1;
      if (s3_) {
        const bool ghost_hit = ghost_set_.erase(ids[k]) > 0;
        (ghost_hit ? main_ : small_).push_back(ids[k]);
      }
    }
    return true;
  }
  // In the client's batches, each last first (release_in_client_batches, simulate.hpp).
  void release(const std::vector<uint64_t>& ids) {
    release_in_client_batches<uint64_t>(ids, [&](std::span<const uint64_t> batch) {
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
        Entry& e = cached_.at(*it);
        if (--e.refs == 0) {
          ++inactive_;
          if (!s3_) {
            lru_.push_back(*it);
            e.lru_pos = std::prev(lru_.end());
            e.in_lru = true;
          }
        }
      }
    });
  }
  uint64_t evictions() const { return evictions_; }

 private:
  void take(uint64_t, Entry& e) {
    if (e.refs++ == 0) {
      --inactive_;
      if (e.in_lru) {
        lru_.erase(e.lru_pos);
        e.in_lru = false;
      }
    }
  }
  void drop(uint64_t id) {
    cached_.erase(id);
    --inactive_;
    ++evictions_;
  }
  void evict_one() {
    if (!s3_) {
      uint64_t id = lru_.front();
      lru_.pop_front();
      drop(id);
      return;
    }
    const size_t small_target = std::max<size_t>(1, cap_ / 10);
    while (true) {
      if (!small_.empty() && (small_.size() >= small_target || main_.empty())) {
        uint64_t id = small_.front();
        small_.pop_front();
        Entry& e = cached_.at(id);
        if (e.refs > 0 || e.freq > 1) {  // held or hit again: promote
          e.freq = 0;
          main_.push_back(id);
          continue;
        }
        drop(id);
        ghost_.push_back(id);
        ghost_set_.insert(id);
        while (ghost_.size() > cap_ - small_target) {
          ghost_set_.erase(ghost_.front());
          ghost_.pop_front();
        }
        return;
      }
      uint64_t id = main_.front();
      main_.pop_front();
      Entry& e = cached_.at(id);
      if (e.refs > 0 || e.freq > 0) {
        if (e.freq > 0) --e.freq;
        main_.push_back(id);
        continue;
      }
      drop(id);
      return;
    }
  }

  uint32_t cap_;
  bool s3_;
  uint64_t inactive_ = 0, evictions_ = 0;
  std::unordered_map<uint64_t, Entry> cached_;
  std::list<uint64_t> lru_;
  std::deque<uint64_t> small_, main_, ghost_;
  std::unordered_set<uint64_t> ghost_set_;
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

Result<SimResult> simulate_policy(const std::vector<TraceRequest>& requests,
                                  const SimOptions& options, const std::string& policy) {
  if (policy != "lru" && policy != "s3fifo")
    return Status(ErrorCode::kInvalidArgument, "policy is lru or s3fifo, not '" + policy + "'");
  Model m(options.capacity, policy == "s3fifo");
  SimResult out;
  std::priority_queue<Hold, std::vector<Hold>, std::greater<>> holds;
  uint64_t order = 0;
  auto release_until = [&](double t) {
    while (!holds.empty() && holds.top().until_ms <= t) {
      m.release(holds.top().ids);
      holds.pop();
    }
  };
  for (const auto& r : requests) {
    const double t = static_cast<double>(r.timestamp_ms);
    release_until(t);
    out.prompt_blocks += r.ids.size();
    const uint32_t matched = m.match(r.ids);
    out.matched_blocks += matched;
    std::vector<uint64_t> held(r.ids.begin(), r.ids.begin() + matched);
    if (matched < r.ids.size()) {
      if (m.insert(r.ids, matched))
        held = r.ids;
      else
        ++out.uncached_requests;
    }
    holds.push(Hold{t + r.output_length * options.token_ms, order++, std::move(held)});
  }
  release_until(1e300);
  out.evictions = m.evictions();
  return out;
}

}  // namespace kvpool::replay
