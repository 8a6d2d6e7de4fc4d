#include "tier_sim.hpp"

#include <algorithm>
#include <deque>
#include <list>
#include <memory>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace kvpool::replay {
namespace {

// Host memory: registered blocks with reference counts; free blocks are capacity - cached.
// Unreferenced blocks are evicted in the policy's order (tier_sim.hpp): lru keeps them in a
// list in returned order and evicts its front; s3fifo keeps its small, main and ghost FIFOs.
class HostTier {
 public:
  HostTier(uint64_t capacity, HostPolicy policy)
      : cap_(capacity), s3_(policy == HostPolicy::kS3Fifo) {}

  // The cached run of ids from `from` on; each hit takes a reference and counts as a use.
  size_t match(const std::vector<uint64_t>& ids, size_t from) {
    size_t n = from;
    for (; n < ids.size(); ++n) {
      auto it = cached_.find(ids[n]);
      if (it == cached_.end()) break;
      take(it->second);
      it->second.freq = std::min<uint32_t>(it->second.freq + 1, 3);
    }
    return n - from;
  }
  // Free + inactive: what an allocate may take (all or nothing, like PoolCore::allocate).
  uint64_t available() const { return cap_ - cached_.size() + inactive_; }
  // Registers ids[k] (k in [from, to)) into host memory; the caller checked available().
  // Returns the ids newly stored (the write-behind's input).
  std::vector<uint64_t> insert(const std::vector<uint64_t>& ids, size_t from, size_t to) {
    std::vector<uint64_t> stored;
    while (cap_ - cached_.size() < to - from) evict_one();
    for (size_t k = from; k < to; ++k) {
      // Still cached past the first miss (its parent was evicted): register deduplicates onto
      // it, as PoolCore does, and the block allocated for it goes back to the free list.
      if (auto it = cached_.find(ids[k]); it != cached_.end()) {
        take(it->second);
        continue;
      }
      cached_[ids[k]].refs = 1;
      stored.push_back(ids[k]);
      if (s3_) {
        const bool ghost_hit = ghost_set_.erase(ids[k]) > 0;
        (ghost_hit ? main_ : small_).push_back(ids[k]);
      }
    }
    return stored;
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
  struct Entry {
    uint32_t refs = 0;
    uint32_t freq = 0;                      // s3fifo: hits, up to 3
    std::list<uint64_t>::iterator lru_pos;  // lru: position in the inactive list
    bool in_lru = false;
  };
  void take(Entry& e) {
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

  uint64_t cap_;
  bool s3_;
  uint64_t inactive_ = 0, evictions_ = 0;
  std::unordered_map<uint64_t, Entry> cached_;
  std::list<uint64_t> lru_;
  std::deque<uint64_t> small_, main_, ghost_;
  std::unordered_set<uint64_t> ghost_set_;
};

// The disk tier: an LRU over slots, touched at write and read; each slot remembers its
// write sequence, the order a start rebuilds.
class DiskTierModel {
 public:
  explicit DiskTierModel(uint64_t slots) : slots_(slots) {}
  bool has(uint64_t id) const { return where_.count(id) != 0; }
  void touch(uint64_t id) { order_.splice(order_.end(), order_, where_.at(id)); }
  void write(uint64_t id) {
    if (slots_ == 0 || has(id)) return;
    if (where_.size() == slots_) {
      where_.erase(order_.front().id);
      order_.pop_front();
      ++evictions_;
    }
    order_.push_back(Slot{id, ++writes_});
    where_[id] = std::prev(order_.end());
  }
  // A start: DiskIndex::load puts the slots found in write-sequence order.
  void restart() {
    order_.sort([](const Slot& a, const Slot& b) { return a.write_seq < b.write_seq; });
  }
  uint64_t evictions() const { return evictions_; }
  uint64_t writes() const { return writes_; }

 private:
  struct Slot {
    uint64_t id;
    uint64_t write_seq;
  };
  uint64_t slots_;
  std::list<Slot> order_;
  std::unordered_map<uint64_t, std::list<Slot>::iterator> where_;
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

class TwoTiers {
 public:
  TwoTiers(const SimOptions& o, uint64_t disk_blocks, HostPolicy policy)
      : o_(o),
        policy_(policy),
        host_(std::make_unique<HostTier>(o.capacity, policy)),
        disk_(disk_blocks) {}

  void serve(const TraceRequest& r, TierSimResult& out) {
    const double t = static_cast<double>(r.timestamp_ms);
    release_until(t);
    const std::vector<uint64_t>& ids = r.ids;
    out.prompt_blocks += ids.size();
    const size_t in_host = host_->match(ids, 0);
    size_t matched = in_host, onboarded = 0, after = 0;
    // Onboard (Engine::defer_match_onboard, DiskTier::start_onboard): the disk run after
    // the host prefix, as far as free + inactive host blocks go; then host memory again.
    size_t disk_run = 0;
    while (in_host + disk_run < ids.size() && disk_.has(ids[in_host + disk_run])) ++disk_run;
    onboarded = std::min<uint64_t>(disk_run, host_->available());
    if (onboarded > 0) {
      for (size_t k = in_host; k < in_host + onboarded; ++k) disk_.touch(ids[k]);
      host_->insert(ids, in_host, in_host + onboarded);  // already on disk: nothing written
      after = host_->match(ids, in_host + onboarded);
      matched = in_host + onboarded + after;
    }
    out.host_hits += in_host + after;
    out.disk_hits += onboarded;
    // The worker allocates the rest, all or nothing, and registers it (written behind).
    size_t held = matched;
    if (matched < ids.size()) {
      if (host_->available() >= ids.size() - matched) {
        for (uint64_t id : host_->insert(ids, matched, ids.size())) disk_.write(id);
        held = ids.size();
      } else {
        ++out.uncached_requests;
      }
    }
    holds_.push(Hold{t + r.output_length * o_.token_ms, order_++,
                     std::vector<uint64_t>(ids.begin(), ids.begin() + held)});
  }

  // Every hold released (the workers are gone), then host memory starts empty.
  void cold_restart() {
    release_until(1e300);
    host_evictions_before_ += host_->evictions();
    host_ = std::make_unique<HostTier>(o_.capacity, policy_);
    disk_.restart();
  }

  void finish(TierSimResult& out, const TierSimResult* before) {
    release_until(1e300);
    out.host_evictions = host_evictions_before_ + host_->evictions();
    out.disk_evictions = disk_.evictions();
    out.disk_writes = disk_.writes();
    if (before) {  // this phase only
      out.host_evictions -= before->host_evictions;
      out.disk_evictions -= before->disk_evictions;
      out.disk_writes -= before->disk_writes;
    }
  }

 private:
  void release_until(double t) {
    while (!holds_.empty() && holds_.top().until_ms <= t) {
      host_->release(holds_.top().ids);
      holds_.pop();
    }
  }

  SimOptions o_;
  HostPolicy policy_;
  std::unique_ptr<HostTier> host_;
  DiskTierModel disk_;
  std::priority_queue<Hold, std::vector<Hold>, std::greater<>> holds_;
  uint64_t order_ = 0;
  uint64_t host_evictions_before_ = 0;
};

Status one_priority(const SimOptions& options) {
  if (options.shallow_levels != 0)
    return Status(ErrorCode::kInvalidArgument,
                  "the models have one priority (--shallow-levels 0 with --policy or a disk)");
  return Status::ok();
}

}  // namespace

Result<HostPolicy> parse_host_policy(const std::string& name) {
  if (name == "lru") return HostPolicy::kLru;
  if (name == "s3fifo") return HostPolicy::kS3Fifo;
  return Status(ErrorCode::kInvalidArgument, "policy is lru or s3fifo, not '" + name + "'");
}

Result<TierSimResult> simulate_tiers(const std::vector<TraceRequest>& requests,
                                     const SimOptions& options, uint64_t disk_blocks,
                                     HostPolicy policy) {
  KVPOOL_RETURN_IF_ERROR(one_priority(options));
  TwoTiers m(options, disk_blocks, policy);
  TierSimResult out;
  for (const auto& r : requests) m.serve(r, out);
  m.finish(out, nullptr);
  return out;
}

Result<std::array<TierSimResult, 2>> simulate_tiers_cold_restart(
    const std::vector<TraceRequest>& requests, const SimOptions& options, uint64_t disk_blocks,
    size_t cold_restart_at) {
  KVPOOL_RETURN_IF_ERROR(one_priority(options));
  TwoTiers m(options, disk_blocks, HostPolicy::kLru);
  std::array<TierSimResult, 2> out{};
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i == cold_restart_at) {
      m.finish(out[0], nullptr);
      m.cold_restart();
    }
    m.serve(requests[i], out[i < cold_restart_at ? 0 : 1]);
  }
  if (cold_restart_at >= requests.size()) {
    m.finish(out[0], nullptr);
    return out;
  }
  m.finish(out[1], &out[0]);
  return out;
}

Result<SimResult> simulate_policy(const std::vector<TraceRequest>& requests,
                                  const SimOptions& options, const std::string& policy) {
  auto p = parse_host_policy(policy);
  if (!p) return p.status();
  auto t = simulate_tiers(requests, options, 0, *p);
  if (!t) return t.status();
  SimResult out;
  out.prompt_blocks = t->prompt_blocks;
  out.matched_blocks = t->host_hits;
  out.uncached_requests = t->uncached_requests;
  out.evictions = t->host_evictions;
  return out;
}

}  // namespace kvpool::replay
