// The router side: which worker holds which KV blocks, rebuilt from router events, and for
// a request's blocks how long a prefix each worker already holds. Sequence hashes name a
// whole prefix, so a set of them per worker is enough to answer "how many leading blocks".
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <unordered_set>

#include "tools/kvpool-events/router_event.hpp"

namespace kvpool::events {

class RouterIndex {
 public:
  void apply(const RouterEvent& event);
  // Every known worker -> how many leading hashes of `sequence_hashes` it holds.
  std::map<int64_t, uint32_t> overlaps(std::span<const uint64_t> sequence_hashes) const;
  // Every known worker -> blocks held.
  std::map<int64_t, size_t> sizes() const;
  size_t total_blocks() const { return total_; }
  bool holds(int64_t worker, uint64_t sequence_hash) const;

 private:
  std::map<int64_t, std::unordered_set<uint64_t>> workers_;
  size_t total_ = 0;
};

}  // namespace kvpool::events
