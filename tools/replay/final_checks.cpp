#include "final_checks.hpp"

#include <chrono>
#include <set>
#include <thread>

#include "kvpool/client.hpp"
#include "kvpool/core/token_block.hpp"
#include "pattern.hpp"

namespace kvpool::replay {

// The final sweep: every block the pool still caches for this slice is matched once, as a
// client would, and checked byte for byte. Returns blocks checked; wrong ones -> violations.
uint64_t sweep(const std::vector<TraceRequest>& reqs, const RunOptions& o,
               std::vector<std::string>& violations) {
  ConnectOptions co;
  co.runtime_dir = o.runtime_dir;
  auto client = Client::connect(o.instance, co);
  if (!client) {
    violations.push_back("final sweep cannot attach: " + client.status().to_string());
    return 0;
  }
  auto pool = client->pool(o.pool);
  if (!pool) {
    violations.push_back("final sweep: " + pool.status().to_string());
    return 0;
  }
  const LayoutConfig& L = pool->layout();
  const size_t region = size_t{L.page_size} * L.inner_dim * L.dtype_bytes;
  std::set<uint64_t> checked;
  std::vector<Token> tokens;
  for (const auto& r : reqs) {
    tokens.clear();
    for (uint64_t id : r.ids) append_block_tokens(id, L.page_size, tokens);
    auto seq = TokenBlockSequence::create(tokens, L.page_size, 0);
    auto hashes = seq->sequence_hashes();
    auto hit = pool->match_sequence_hashes(hashes);
    if (!hit) {
      violations.push_back("final sweep: match: " + hit.status().to_string());
      return checked.size();
    }
    for (size_t k = 0; k < hit->size(); ++k) {
      if (!checked.insert(r.ids[k]).second) continue;
      for (uint32_t l = 0; l < L.num_layers; ++l)
        for (uint32_t oo = 0; oo < L.outer_dim; ++oo)
          if (!check_region(*(*hit)[k].address(l, oo), region, r.ids[k], l * L.outer_dim + oo)) {
            violations.push_back("final sweep: cached block of trace id " +
                                 std::to_string(r.ids[k]) + " (pool block " +
                                 std::to_string((*hit)[k].block_id()) + ") holds wrong bytes");
            l = L.num_layers;
            break;
          }
    }
  }
  client->flush();
  return checked.size();
}

// Waits (bounded) until the daemon has seen every worker go: no client attached and
// nothing active or mutable; returns the last status read.
Result<CtlStatus> settle(const CtlTarget& t, const std::string& pool, uint32_t resident) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    auto s = ctl_status(t, pool);
    if (!s) return s;
    bool quiet = s->clients <= resident && s->active == 0 && s->mutable_blocks == 0;
    if (quiet || std::chrono::steady_clock::now() >= deadline) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // poll interval
  }
}

}  // namespace kvpool::replay
