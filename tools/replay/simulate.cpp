#include "simulate.hpp"

#include <cstdlib>
#include <memory>
#include <queue>

#include "kvpool/pool/pool_core.hpp"

namespace kvpool::replay {

namespace {

struct Hold {
  double until_ms;
  uint64_t order;  // ties: earlier arrival releases first
  std::vector<pool::BlockRef> blocks;
  bool operator>(const Hold& o) const {
    return until_ms != o.until_ms ? until_ms > o.until_ms : order > o.order;
  }
};

}  // namespace

Result<SimResult> simulate(const std::vector<TraceRequest>& requests, const SimOptions& options) {
  pool::PoolCoreConfig cfg;
  cfg.num_blocks = options.capacity;
  cfg.max_owners = 1;
  auto bytes = pool::PoolCore::arena_bytes(cfg);
  if (!bytes) return bytes.status();
  size_t rounded = (*bytes + 63) / 64 * 64;
  std::unique_ptr<void, decltype(&std::free)> memory(std::aligned_alloc(64, rounded), &std::free);
  if (!memory) return Status(ErrorCode::kResourceExhausted, "simulation: out of memory");
  auto core = pool::PoolCore::create(memory.get(), rounded, cfg, 0, "simulation");
  if (!core) return core.status();

  SimResult out;
  std::priority_queue<Hold, std::vector<Hold>, std::greater<>> holds;
  std::vector<uint64_t> hashes;
  std::vector<pool::BlockRef> refs, fresh, registered;
  std::vector<pool::RegisterItem> items;
  auto release_until = [&](double t) -> Status {
    while (!holds.empty() && holds.top().until_ms <= t) {
      const Hold& h = holds.top();
      Status st = Status::ok();
      release_in_client_batches<pool::BlockRef>(h.blocks, [&](std::span<const pool::BlockRef> b) {
        if (st.is_ok()) st = core->release_immutable(0, b);
      });
      KVPOOL_RETURN_IF_ERROR(st);
      holds.pop();
    }
    return Status::ok();
  };
  uint64_t order = 0;
  for (const auto& r : requests) {
    const double t = static_cast<double>(r.timestamp_ms);
    KVPOOL_RETURN_IF_ERROR(release_until(t));
    hashes.clear();
    for (uint64_t id : r.ids) hashes.push_back(sim_hash(id));
    out.prompt_blocks += hashes.size();
    refs.assign(hashes.size(), pool::BlockRef{});
    auto hit = core->match(0, hashes, refs.data());
    if (!hit) return hit.status();
    const uint32_t matched = *hit;
    out.matched_blocks += matched;
    refs.resize(matched);
    const uint32_t need = static_cast<uint32_t>(hashes.size()) - matched;
    if (need > 0) {
      fresh.assign(need, pool::BlockRef{});
      Status st = core->allocate(0, need, fresh.data());
      if (st.code() == ErrorCode::kNotEnoughBlocks) {
        ++out.uncached_requests;
      } else if (!st.is_ok()) {
        return st;
      } else {
        items.clear();
        for (uint32_t k = 0; k < need; ++k) {
          size_t idx = matched + k;
          items.push_back(
              pool::RegisterItem{fresh[k], hashes[idx], hashes[idx], idx ? hashes[idx - 1] : 0,
                                 block_priority(idx, options.shallow_levels), idx ? 1u : 0u});
        }
        registered.assign(need, pool::BlockRef{});
        KVPOOL_RETURN_IF_ERROR(core->register_blocks(0, items, registered.data()));
        refs.insert(refs.end(), registered.begin(), registered.end());
      }
    }
    holds.push(Hold{t + r.output_length * options.token_ms, order++, refs});
  }
  KVPOOL_RETURN_IF_ERROR(release_until(1e300));
  out.evictions = core->stats().evictions.load(std::memory_order_relaxed);
  return out;
}

}  // namespace kvpool::replay
