#include "worker.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/core/token_block.hpp"
#include "pattern.hpp"
#include "simulate.hpp"

namespace kvpool::replay {

namespace {

using Clock = std::chrono::steady_clock;

struct Assigned {
  uint32_t index;
  uint64_t timestamp_ms;
  uint32_t output_length;
  std::vector<uint64_t> ids;
};

struct Hold {
  Clock::time_point until;
  size_t order;  // ties: the earlier request releases first, as the simulations do
  std::vector<ImmutableBlock> blocks;
};
// A min-heap on (until, order) (std::push_heap / pop_heap with this order).
bool later(const Hold& a, const Hold& b) {
  return a.until != b.until ? a.until > b.until : a.order > b.order;
}

int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

// One line to the coordinator in one write(): whole even if this process dies right after.
void emit(const std::string& line) {
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n <= 0) return;  // the coordinator is gone: nothing to report to
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

int run_worker(const WorkerOptions& o) {
  std::vector<Assigned> work;
  {
    std::ifstream in(o.assign_file);
    if (!in) {
      std::fprintf(stderr, "replay worker: cannot read %s\n", o.assign_file.c_str());
      return 2;
    }
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      Assigned a;
      size_t n = 0;
      if (!(ls >> a.index >> a.timestamp_ms >> a.output_length >> n)) continue;
      a.ids.resize(n);
      for (auto& id : a.ids) ls >> id;
      work.push_back(std::move(a));
    }
  }
  ConnectOptions co;
  co.runtime_dir = o.runtime_dir;
  auto client = Client::connect(o.instance, co);
  if (!client) {
    std::fprintf(stderr, "replay worker: %s\n", client.status().to_string().c_str());
    return client.status().code() == ErrorCode::kDaemonGone ? 3 : 2;
  }
  auto pool = client->pool(o.pool);
  if (!pool) {
    std::fprintf(stderr, "replay worker: %s\n", pool.status().to_string().c_str());
    return 2;
  }
  const LayoutConfig& L = pool->layout();
  const uint32_t page = L.page_size;
  const size_t region_bytes = size_t{page} * L.inner_dim * L.dtype_bytes;

  int64_t start_ns = o.start_ns;
  if (start_ns < 0) {
    emit("READY\n");
    std::string go;
    if (!(std::cin >> go >> start_ns) || go != "GO") return 2;  // coordinator gone
  }
  const Clock::time_point start{std::chrono::nanoseconds(start_ns)};
  auto at = [&](double trace_ms) {
    return start + std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double, std::milli>(trace_ms / o.speed));
  };

  auto gone = [&](const Status& st) {
    if (st.code() != ErrorCode::kDaemonGone && st.code() != ErrorCode::kDisconnected) return;
    std::fprintf(stderr, "replay worker %d: %s\n", getpid(), st.to_string().c_str());
    std::exit(3);
  };

  std::vector<Hold> holds;  // heap: the earliest end of decode at front()
  std::vector<Token> tokens;
  bool corrupt_seen = false;
  size_t next = 0;
  char buf[256];
  while (next < work.size() || !holds.empty()) {
    const bool release_first =
        !holds.empty() &&
        (next >= work.size() || holds.front().until <= at(double(work[next].timestamp_ms)));
    if (release_first) {
      // Pacing, not synchronisation: the trace says when this request stops decoding.
      std::this_thread::sleep_until(holds.front().until);
      auto t0 = Clock::now();
      std::pop_heap(holds.begin(), holds.end(), later);
      Hold h = std::move(holds.back());
      holds.pop_back();
      h.blocks.clear();  // drops every reference (queued, in order)
      client->flush();   // and sends them now
      std::snprintf(buf, sizeof(buf), "R %lld\n",
                    static_cast<long long>(ns_between(t0, Clock::now())));
      emit(buf);
      continue;
    }
    const Assigned& a = work[next++];
    const auto due = at(double(a.timestamp_ms));
    std::this_thread::sleep_until(due);
    const auto t0 = Clock::now();
    const int64_t late_us = ns_between(due, t0) / 1000;

    tokens.clear();
    for (uint64_t id : a.ids) append_block_tokens(id, page, tokens);
    auto seq = TokenBlockSequence::create(tokens, page, /*salt=*/0);
    if (!seq) {
      std::fprintf(stderr, "replay worker: %s\n", seq.status().to_string().c_str());
      return 2;
    }
    auto hashes = seq->sequence_hashes();

    auto hit = pool->match_sequence_hashes(hashes, MatchOptions{.onboard = o.onboard});
    const auto t1 = Clock::now();
    if (!hit) {
      gone(hit.status());
      std::fprintf(stderr, "replay worker: match: %s\n", hit.status().to_string().c_str());
      return 2;
    }
    const size_t matched = hit->size();
    uint64_t verified = 0, corrupt = 0;
    for (size_t k = 0; k < matched; ++k) {
      const ImmutableBlock& b = (*hit)[k];
      bool ok = true;
      for (uint32_t l = 0; l < L.num_layers; ++l)
        for (uint32_t oo = 0; oo < L.outer_dim; ++oo) {
          const std::byte* p = *b.address(l, oo);
          ok = check_region(p, region_bytes, a.ids[k], l * L.outer_dim + oo) && ok;
          verified += region_bytes;
        }
      if (!ok) {
        ++corrupt;
        std::fprintf(stderr,
                     "replay worker %d: CORRUPT: request %u block %zu (trace id %llu, pool block "
                     "%u) does not hold the bytes its writer wrote\n",
                     getpid(), a.index, k, static_cast<unsigned long long>(a.ids[k]), b.block_id());
      }
    }
    corrupt_seen = corrupt_seen || corrupt > 0;

    std::vector<ImmutableBlock> held = std::move(*hit);
    const uint32_t need = static_cast<uint32_t>(hashes.size() - matched);
    int64_t alloc_ns = -1, reg_ns = -1;
    bool cached = true;
    if (need > 0) {
      const auto a0 = Clock::now();
      auto fresh = pool->allocate_blocks(need);
      alloc_ns = ns_between(a0, Clock::now());
      if (!fresh) {
        gone(fresh.status());
        if (fresh.status().code() != ErrorCode::kNotEnoughBlocks) {
          std::fprintf(stderr, "replay worker: allocate: %s\n", fresh.status().to_string().c_str());
          return 2;
        }
        cached = false;  // blocks held by running requests: served without caching its tail
      } else {
        for (uint32_t k = 0; k < need; ++k) {
          MutableBlock& b = (*fresh)[k];
          const TokenBlock& tb = seq->blocks()[matched + k];
          (void)b.init_sequence(0, tb.parent_sequence_hash);
          (void)b.add_tokens(tb.tokens);
          b.set_priority(block_priority(matched + k, o.shallow_levels));
          if (Status st = b.commit(); !st.is_ok()) {
            std::fprintf(stderr, "replay worker: commit: %s\n", st.to_string().c_str());
            return 2;
          }
          for (uint32_t l = 0; l < L.num_layers; ++l)
            for (uint32_t oo = 0; oo < L.outer_dim; ++oo)
              fill_region(*b.address(l, oo), region_bytes, a.ids[matched + k],
                          l * L.outer_dim + oo);
          // The test hook proving the checks can fail: one wrong byte in one block.
          if (o.corrupt_id >= 0 && a.ids[matched + k] == static_cast<uint64_t>(o.corrupt_id))
            (*b.address(0, 0))[0] ^= std::byte{1};
        }
        const auto r0 = Clock::now();
        auto reg = pool->register_blocks(std::move(*fresh));
        reg_ns = ns_between(r0, Clock::now());
        if (!reg) {
          gone(reg.status());
          std::fprintf(stderr, "replay worker: register: %s\n", reg.status().to_string().c_str());
          return 2;
        }
        for (auto& b : *reg) held.push_back(std::move(b));
      }
    }
    std::snprintf(buf, sizeof(buf), "D %u %zu %zu %llu %llu %d %lld %lld %lld %lld\n", a.index,
                  hashes.size(), matched, static_cast<unsigned long long>(verified),
                  static_cast<unsigned long long>(corrupt), cached ? 1 : 0,
                  static_cast<long long>(late_us), static_cast<long long>(ns_between(t0, t1)),
                  static_cast<long long>(alloc_ns), static_cast<long long>(reg_ns));
    emit(buf);
    holds.push_back(
        Hold{at(double(a.timestamp_ms) + a.output_length * o.token_ms), next, std::move(held)});
    std::push_heap(holds.begin(), holds.end(), later);
  }
  client->flush();
  return corrupt_seen ? 1 : 0;
}

}  // namespace kvpool::replay
