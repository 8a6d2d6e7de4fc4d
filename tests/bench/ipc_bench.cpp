// Cross-process cost of kvpool: the same registry operations on the in-process core and
// through kvpoold (client and daemon in separate processes), in one run, as ratios.
//   ./build/tests/bench/kvpool_ipc_bench [--blocks N] [--samples N] [--seconds S]
// Starts its own kvpoold (a temp runtime dir) and stops it at the end.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "support/daemon_process.hpp"

using namespace kvpool;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kBatch = 64;

struct Args {
  uint32_t blocks = 100'000;
  int samples = 20'000;
  double seconds = 2.0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

std::vector<Token> tokens_for(uint64_t seed, uint32_t page) {
  std::vector<Token> t(page);
  for (uint32_t i = 0; i < page; ++i) t[i] = static_cast<Token>(seed * 131 + i);
  return t;
}

// ---- in-process core -------------------------------------------------------------------

struct CoreFigures {
  double match, allocate, register64;
};

CoreFigures run_core(const Args& a, const std::vector<uint64_t>& hashes) {
  pool::PoolCoreConfig c{a.blocks, 4, 0};
  size_t bytes = *pool::PoolCore::arena_bytes(c);
  char* mem = static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  auto core = std::move(pool::PoolCore::create(mem, bytes, c).value());
  std::vector<pool::BlockRef> refs(hashes.size()), out(hashes.size());
  // As in the daemon: the queried half at priority 1, so churn (priority 0) evicts churn.
  const uint32_t n = static_cast<uint32_t>(hashes.size());
  (void)core.allocate(0, n, refs.data());
  std::vector<pool::RegisterItem> items(n);
  for (uint32_t i = 0; i < n; ++i) items[i] = {refs[i], hashes[i], hashes[i], 0, 1, 0};
  (void)core.register_blocks(0, items, out.data());
  (void)core.release_immutable(0, {out.data(), n});
  std::mt19937_64 rng(7);
  std::vector<double> m, al, rg;
  std::vector<uint64_t> q(kBatch);
  std::vector<pool::BlockRef> r(kBatch);
  std::vector<pool::RegisterItem> it(kBatch);
  for (int s = 0; s < a.samples; ++s) {
    size_t start = rng() % (hashes.size() - kBatch);
    std::copy_n(hashes.begin() + static_cast<long>(start), kBatch, q.begin());
    auto t0 = Clock::now();
    auto hit = core.match(1, q, r.data());
    if (*hit != kBatch) std::fprintf(stderr, "in-process match hit only %u\n", *hit);
    (void)core.release_immutable(1, {r.data(), *hit});
    m.push_back(us_since(t0));
    t0 = Clock::now();
    (void)core.allocate(1, kBatch, r.data());
    (void)core.release_mutable(1, r);
    al.push_back(us_since(t0));
    t0 = Clock::now();
    (void)core.allocate(1, kBatch, r.data());
    for (uint32_t i = 0; i < kBatch; ++i) {
      uint64_t h = rng();
      it[i] = {r[i], h, h, 0, 0, 0};
    }
    (void)core.register_blocks(1, it, r.data());
    (void)core.release_immutable(1, r);
    rg.push_back(us_since(t0));
  }
  std::free(mem);
  return {median(m), median(al), median(rg)};
}

// ---- daemon ----------------------------------------------------------------------------

// kvpoold's config: one pool of small blocks (the figures are about the calls, not bytes).
nlohmann::json bench_config(const Args& a) {
  nlohmann::json layout = {{"num_layers", 1}, {"outer_dim", 1},   {"page_size", 16},
                           {"inner_dim", 8},  {"dtype_bytes", 2}, {"alignment", 64}};
  return {{"log_level", "warn"},
          {"pools", nlohmann::json::array(
                        {{{"name", "bench"}, {"num_blocks", a.blocks}, {"layout", layout}}})}};
}

Result<Client> connect(const testsupport::DaemonProcess& d) {
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  return Client::connect(d.instance(), o);
}

// Registers hashes.size() blocks at priority 1 and returns them (inactive, matchable); the
// benchmark's own churn registers at priority 0, so it evicts its own blocks, not these.
void fill(Pool& pool, std::vector<uint64_t>& hashes, uint32_t n) {
  uint32_t page = pool.page_size();
  for (uint32_t done = 0; done < n;) {
    uint32_t k = std::min<uint32_t>(1024, n - done);
    auto blocks = pool.allocate_blocks(k);
    if (!blocks) {
      std::fprintf(stderr, "fill: %s\n", blocks.status().to_string().c_str());
      std::exit(1);
    }
    for (uint32_t i = 0; i < k; ++i) {
      auto& b = (*blocks)[i];
      (void)b.init_sequence(0);
      auto t = tokens_for(done + i, page);
      (void)b.add_tokens(t);
      (void)b.commit();
      b.set_priority(1);
      hashes[done + i] = *b.sequence_hash();
    }
    auto imm = pool.register_blocks(std::move(*blocks));
    done += k;
  }
}

struct DaemonFigures {
  double match, match_p99, allocate, register64, idle_match;
};

DaemonFigures run_daemon(const Args& a, Pool& pool, const std::vector<uint64_t>& hashes) {
  std::mt19937_64 rng(7);
  std::vector<double> m, al, rg, idle;
  uint32_t page = pool.page_size();
  for (int s = 0; s < a.samples; ++s) {
    size_t start = rng() % (hashes.size() - kBatch);
    std::span<const uint64_t> q(hashes.data() + start, kBatch);
    auto t0 = Clock::now();
    {
      auto r = pool.match_sequence_hashes(q);
      if (r->size() != kBatch) std::fprintf(stderr, "kvpoold match hit only %zu\n", r->size());
    }
    m.push_back(us_since(t0));
    t0 = Clock::now();
    { auto r = pool.allocate_blocks(kBatch); }
    al.push_back(us_since(t0));
    t0 = Clock::now();
    {
      auto r = pool.allocate_blocks(kBatch);
      for (auto& b : *r) {
        (void)b.init_sequence(rng());
        (void)b.add_tokens(tokens_for(s, page));
        (void)b.commit();
      }
      auto imm = pool.register_blocks(std::move(*r));
    }
    rg.push_back(us_since(t0));
  }
  // Idle: let the engine park (it spins spin_iterations polls first), then ask.
  for (int s = 0; s < 50; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    size_t start = rng() % (hashes.size() - kBatch);
    auto t0 = Clock::now();
    { auto r = pool.match_sequence_hashes({hashes.data() + start, kBatch}); }
    idle.push_back(us_since(t0));
  }
  return {median(m), pct(m, 0.99), median(al), median(rg), median(idle)};
}

// N client processes each loop on match-64 for `seconds`; returns total matches per second.
double throughput(const testsupport::DaemonProcess& d, const std::vector<uint64_t>& hashes,
                  int clients, double seconds) {
  int pfd[2];
  if (pipe(pfd) != 0) return 0;
  std::vector<pid_t> kids;
  for (int c = 0; c < clients; ++c) {
    pid_t p = fork();
    if (p == 0) {
      close(pfd[0]);
      uint64_t ops = 0;
      auto cl = connect(d);
      if (cl) {
        auto pool = cl->pool("bench");
        std::mt19937_64 rng(c);
        auto end = Clock::now() + std::chrono::duration<double>(seconds);
        while (Clock::now() < end) {
          for (int k = 0; k < 16; ++k) {
            size_t start = rng() % (hashes.size() - kBatch);
            auto r = pool->match_sequence_hashes({hashes.data() + start, kBatch});
            ++ops;
          }
        }
      }
      ssize_t w = write(pfd[1], &ops, sizeof(ops));
      (void)w;
      _exit(0);
    }
    kids.push_back(p);
  }
  close(pfd[1]);
  uint64_t total = 0, ops = 0;
  for (int c = 0; c < clients; ++c)
    if (read(pfd[0], &ops, sizeof(ops)) == sizeof(ops)) total += ops;
  close(pfd[0]);
  for (pid_t p : kids) waitpid(p, nullptr, 0);
  return static_cast<double>(total) / seconds;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--blocks")) a.blocks = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--samples")) a.samples = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seconds")) a.seconds = std::atof(argv[i + 1]);
  }
  const char* kvpoold = std::getenv("KVPOOLD");
  testsupport::DaemonProcess d(bench_config(a), kvpoold ? kvpoold : KVPOOLD_PATH);
  try {
    d.start(20s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  auto client = connect(d);
  if (!client) {
    std::fprintf(stderr, "cannot reach kvpoold: %s\n", client.status().to_string().c_str());
    return 1;
  }
  auto pool = client->pool("bench");
  std::vector<uint64_t> hashes(a.blocks / 2);
  fill(*pool, hashes, a.blocks / 2);
  client->flush();

  CoreFigures core = run_core(a, hashes);
  DaemonFigures dm = run_daemon(a, *pool, hashes);
  std::printf("kvpool cross-process cost: pool of %u blocks, batches of %u, %d samples, medians\n",
              a.blocks, kBatch, a.samples);
  std::printf("%-34s %12s %12s %8s\n", "operation", "in-process", "kvpoold", "ratio");
  std::printf("%-34s %10.2fus %10.2fus %7.1fx\n", "match-64 (all hit) + release", core.match,
              dm.match, dm.match / core.match);
  std::printf("%-34s %10.2fus %10.2fus %7.1fx\n", "allocate-64 + release", core.allocate,
              dm.allocate, dm.allocate / core.allocate);
  std::printf("%-34s %10.2fus %10.2fus %7.1fx\n", "allocate+register-64 + release", core.register64,
              dm.register64, dm.register64 / core.register64);
  std::printf("match-64 p99 (busy daemon): %.2f us\n", dm.match_p99);
  std::printf("match-64 against an idle (parked) daemon: %.2f us median\n", dm.idle_match);
  std::printf("aggregate match-64 throughput (client processes, %.1f s each):\n", a.seconds);
  double one = 0;
  for (int n : {1, 2, 4, 8}) {
    double t = throughput(d, hashes, n, a.seconds);
    if (n == 1) one = t;
    std::printf("  %d client(s): %10.0f matches/s  (%.2fx of 1 client)\n", n, t,
                one > 0 ? t / one : 0);
  }
  d.kill(SIGTERM);
  return d.wait_exit(10s) ? 0 : 1;
}
