#include "worker.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
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

// The requests assigned to this worker, one per line: index, timestamp, output length, the
// number of block ids and the ids. Nothing when the file cannot be read.
std::optional<std::vector<Assigned>> read_assignment(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::vector<Assigned> work;
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
  return work;
}

// A daemon that is gone ends this worker with 3 (the coordinator replaces it).
void exit_if_gone(const Status& st) {
  if (st.code() != ErrorCode::kDaemonGone && st.code() != ErrorCode::kDisconnected) return;
  std::fprintf(stderr, "replay worker %d: %s\n", getpid(), st.to_string().c_str());
  std::exit(3);
}

int fail(const char* what, const Status& st) {
  std::fprintf(stderr, "replay worker: %s%s\n", what, st.to_string().c_str());
  return 2;
}

// One worker's replay: its requests in trace time, each holding its blocks until its decode
// ends (holds, a heap on the end time), every matched block's bytes checked.
class Worker {
 public:
  Worker(const WorkerOptions& o, Client& client, Pool& pool, Clock::time_point start)
      : o_(o),
        client_(client),
        pool_(pool),
        L_(pool.layout()),
        region_bytes_(size_t{L_.page_size} * L_.inner_dim * L_.dtype_bytes),
        start_(start) {}

  // 0, 1 when a matched block held wrong bytes, 2 on an error.
  int run(const std::vector<Assigned>& work) {
    size_t next = 0;
    while (next < work.size() || !holds_.empty()) {
      const bool release_first =
          !holds_.empty() &&
          (next >= work.size() || holds_.front().until <= at(double(work[next].timestamp_ms)));
      if (release_first) {
        release_next();
        continue;
      }
      const Assigned& a = work[next++];
      if (int rc = serve(a, next); rc != 0) return rc;
    }
    client_.flush();
    return corrupt_seen_ ? 1 : 0;
  }

 private:
  Clock::time_point at(double trace_ms) const {
    return start_ + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double, std::milli>(trace_ms / o_.speed));
  }

  // The request whose decode ends first lets go of its blocks.
  void release_next() {
    // Pacing, not synchronisation: the trace says when this request stops decoding.
    std::this_thread::sleep_until(holds_.front().until);
    auto t0 = Clock::now();
    std::pop_heap(holds_.begin(), holds_.end(), later);
    Hold h = std::move(holds_.back());
    holds_.pop_back();
    h.blocks.clear();  // drops every reference (queued, in order)
    client_.flush();   // and sends them now
    char buf[64];
    std::snprintf(buf, sizeof(buf), "R %lld\n",
                  static_cast<long long>(ns_between(t0, Clock::now())));
    emit(buf);
  }

  // Checks every matched block holds the bytes its writer wrote; counts bytes and wrong ones.
  void verify(const Assigned& a, const std::vector<ImmutableBlock>& hit, uint64_t& verified,
              uint64_t& corrupt) const {
    for (size_t k = 0; k < hit.size(); ++k) {
      const ImmutableBlock& b = hit[k];
      bool ok = true;
      for (uint32_t l = 0; l < L_.num_layers; ++l)
        for (uint32_t oo = 0; oo < L_.outer_dim; ++oo) {
          const std::byte* p = *b.address(l, oo);
          ok = check_region(p, region_bytes_, a.ids[k], l * L_.outer_dim + oo) && ok;
          verified += region_bytes_;
        }
      if (ok) continue;
      ++corrupt;
      std::fprintf(stderr,
                   "replay worker %d: CORRUPT: request %u block %zu (trace id %llu, pool block "
                   "%u) does not hold the bytes its writer wrote\n",
                   getpid(), a.index, k, static_cast<unsigned long long>(a.ids[k]), b.block_id());
    }
  }

  // Commits block `b` as trace block `id` (the sequence's block `k`) and writes its bytes.
  Status fill(MutableBlock& b, const TokenBlock& tb, uint64_t id, size_t k) const {
    (void)b.init_sequence(0, tb.parent_sequence_hash);
    (void)b.add_tokens(tb.tokens);
    b.set_priority(block_priority(k, o_.shallow_levels));
    KVPOOL_RETURN_IF_ERROR(b.commit());
    for (uint32_t l = 0; l < L_.num_layers; ++l)
      for (uint32_t oo = 0; oo < L_.outer_dim; ++oo)
        fill_region(*b.address(l, oo), region_bytes_, id, l * L_.outer_dim + oo);
    // The test hook proving the checks can fail: one wrong byte in one block.
    if (o_.corrupt_id >= 0 && id == static_cast<uint64_t>(o_.corrupt_id))
      (*b.address(0, 0))[0] ^= std::byte{1};
    return Status::ok();
  }

  // Allocates, fills and registers the blocks match did not find; they join `held`.
  // `cached` false: the pool's blocks were all held, the request is served uncached.
  int cache_tail(const Assigned& a, const TokenBlockSequence& seq, size_t matched, uint32_t need,
                 std::vector<ImmutableBlock>& held, int64_t& alloc_ns, int64_t& reg_ns,
                 bool& cached) {
    const auto a0 = Clock::now();
    auto fresh = pool_.allocate_blocks(need);
    alloc_ns = ns_between(a0, Clock::now());
    if (!fresh) {
      exit_if_gone(fresh.status());
      if (fresh.status().code() != ErrorCode::kNotEnoughBlocks)
        return fail("allocate: ", fresh.status());
      cached = false;  // blocks held by running requests: served without caching its tail
      return 0;
    }
    for (uint32_t k = 0; k < need; ++k)
      if (Status st = fill((*fresh)[k], seq.blocks()[matched + k], a.ids[matched + k], matched + k);
          !st.is_ok())
        return fail("commit: ", st);
    const auto r0 = Clock::now();
    auto reg = pool_.register_blocks(std::move(*fresh));
    reg_ns = ns_between(r0, Clock::now());
    if (!reg) {
      exit_if_gone(reg.status());
      return fail("register: ", reg.status());
    }
    for (auto& b : *reg) held.push_back(std::move(b));
    return 0;
  }

  // One request at its time: match its prefix (bytes checked), cache the rest, report, hold.
  int serve(const Assigned& a, size_t order) {
    const auto due = at(double(a.timestamp_ms));
    std::this_thread::sleep_until(due);
    const auto t0 = Clock::now();
    const int64_t late_us = ns_between(due, t0) / 1000;
    tokens_.clear();
    for (uint64_t id : a.ids) append_block_tokens(id, L_.page_size, tokens_);
    auto seq = TokenBlockSequence::create(tokens_, L_.page_size, /*salt=*/0);
    if (!seq) return fail("", seq.status());
    auto hashes = seq->sequence_hashes();
    auto hit = o_.peer_holder.empty()
                   ? pool_.match_sequence_hashes(hashes, MatchOptions{.onboard = o_.onboard})
                   : pool_.match_sequence_hashes(
                         hashes, PeerFetchOptions{std::chrono::milliseconds(o_.peer_deadline_ms),
                                                  o_.peer_holder});
    const auto t1 = Clock::now();
    if (!hit) {
      exit_if_gone(hit.status());
      return fail("match: ", hit.status());
    }
    const size_t matched = hit->size();
    uint64_t verified = 0, corrupt = 0;
    verify(a, *hit, verified, corrupt);
    corrupt_seen_ = corrupt_seen_ || corrupt > 0;
    std::vector<ImmutableBlock> held = std::move(*hit);
    int64_t alloc_ns = -1, reg_ns = -1;
    bool cached = true;
    const uint32_t need = static_cast<uint32_t>(hashes.size() - matched);
    if (need > 0)
      if (int rc = cache_tail(a, *seq, matched, need, held, alloc_ns, reg_ns, cached); rc != 0)
        return rc;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "D %u %zu %zu %llu %llu %d %lld %lld %lld %lld\n", a.index,
                  hashes.size(), matched, static_cast<unsigned long long>(verified),
                  static_cast<unsigned long long>(corrupt), cached ? 1 : 0,
                  static_cast<long long>(late_us), static_cast<long long>(ns_between(t0, t1)),
                  static_cast<long long>(alloc_ns), static_cast<long long>(reg_ns));
    emit(buf);
    holds_.push_back(
        Hold{at(double(a.timestamp_ms) + a.output_length * o_.token_ms), order, std::move(held)});
    std::push_heap(holds_.begin(), holds_.end(), later);
    return 0;
  }

  const WorkerOptions& o_;
  Client& client_;
  Pool& pool_;
  const LayoutConfig L_;
  const size_t region_bytes_;
  const Clock::time_point start_;
  std::vector<Hold> holds_;  // heap: the earliest end of decode at front()
  std::vector<Token> tokens_;
  bool corrupt_seen_ = false;
};

}  // namespace

int run_worker(const WorkerOptions& o) {
  auto work = read_assignment(o.assign_file);
  if (!work) {
    std::fprintf(stderr, "replay worker: cannot read %s\n", o.assign_file.c_str());
    return 2;
  }
  ConnectOptions co;
  co.runtime_dir = o.runtime_dir;
  auto client = Client::connect(o.instance, co);
  if (!client) {
    std::fprintf(stderr, "replay worker: %s\n", client.status().to_string().c_str());
    return client.status().code() == ErrorCode::kDaemonGone ? 3 : 2;
  }
  auto pool = client->pool(o.pool);
  if (!pool) return fail("", pool.status());
  int64_t start_ns = o.start_ns;
  if (start_ns < 0) {
    emit("READY\n");
    std::string go;
    if (!(std::cin >> go >> start_ns) || go != "GO") return 2;  // coordinator gone
  }
  const Clock::time_point start{std::chrono::nanoseconds(start_ns)};
  return Worker(o, *client, *pool, start).run(*work);
}

}  // namespace kvpool::replay
