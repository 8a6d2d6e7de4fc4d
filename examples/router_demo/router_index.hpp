// The router side: which worker holds which KV blocks, rebuilt from router events, and for
// a request's blocks how long a prefix each worker already holds. Sequence hashes name a
// whole prefix, so a set of them per worker is enough to answer "how many leading blocks".
//
// Each storage tier of a worker is kept apart (a block may be in host memory and on disk,
// and leaving one says nothing about the other); a worker holds a block while any of its
// tiers does, and the overlap counts blocks held in any tier (kvpoold onboards a prefix that
// continues on disk). A "cleared" empties every tier of the worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string_view>
#include <unordered_map>

#include "tools/kvpool-events/router_event.hpp"

namespace kvpool::events {

class RouterIndex {
 public:
  void apply(const RouterEvent& event);
  // Every known worker -> how many leading hashes of `sequence_hashes` it holds.
  std::map<int64_t, uint32_t> overlaps(std::span<const uint64_t> sequence_hashes) const;
  // Every known worker -> blocks held (in any tier).
  std::map<int64_t, size_t> sizes() const;
  size_t total_blocks() const { return total_; }
  bool holds(int64_t worker, uint64_t sequence_hash) const;
  // Held in that storage tier ("host_pinned", "device", "disk"; "" is Dynamo 0.2.1's none).
  bool holds_in(int64_t worker, uint64_t sequence_hash, std::string_view storage_tier) const;

 private:
  static uint8_t tier_bit(std::string_view storage_tier);
  // Worker -> sequence hash -> a bit per tier holding it (never 0: emptied entries go).
  std::map<int64_t, std::unordered_map<uint64_t, uint8_t>> workers_;
  size_t total_ = 0;
};

}  // namespace kvpool::events
