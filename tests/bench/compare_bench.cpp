// kvpool against what a user would build instead: one registry workload, five backends.
//   (a) in-process  kvpool's PoolCore, called directly
//   (b) kvpoold     the daemon over shared memory, through libkvpool (started here)
//   (b') kvpoold-ring the same daemon through libkvpool's transport alone (raw records)
//   (c) unix-socket a request/response server of ours: one process, blocking I/O on a
//                   SOCK_SEQPACKET socket, the same PoolCore and the daemon's own request
//                   validation (daemon::Dispatcher), records as on kvpoold's rings
// (the backends live in bench_backends.{hpp,cpp}, shared with kvpool_paced_bench)
//   (d) redis       a real redis-server on a Unix socket, used as a user would: the registry
//                   is hash -> block id strings (MSET / MGET), the free list a LIST (LPOP
//                   count / RPUSH); releases are pipelined (their replies read with the next
//                   command's), as libkvpool batches them
// Operations (each a sample, medians over all samples):
//   match-64       64 registered hashes, all hit, and their release
//   allocate-64    64 blocks and their release
//   register-64    allocate 64, hash 64 token pages, register them, release
// Backends take turns in rounds so that a noisy machine weighs on all of them alike.
//   kvpool_compare_bench [--blocks N] [--samples N] [--rounds N]
// Env: KVPOOLD (daemon binary), REDIS_SERVER (redis-server binary).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_backends.hpp"

using namespace kvpool::bench;

namespace {

struct Args {
  uint32_t blocks = 100'000;
  int samples = 10'000;
  int rounds = 10;
};

struct Samples {
  std::vector<double> match, allocate, register64;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--blocks")) a.blocks = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--samples")) a.samples = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rounds")) a.rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  if (a.blocks < 4 * kFillBatch) die("--blocks must be at least 4096");
  const char* kvpoold = std::getenv("KVPOOLD");
  if (!kvpoold) kvpoold = KVPOOLD_PATH;

  // Every server is forked before this process starts a thread (libkvpool's lease thread).
  KvpooldServer kvpoold_server(a.blocks, kvpoold);
  SocketServer sock_server(a.blocks);
  RedisServer redis_server(RedisServer::find_binary().empty() ? "redis-server"
                                                              : RedisServer::find_binary());
  auto core = make_core_backend(a.blocks);
  auto daemon = std::make_unique<DaemonBackend>(kvpoold_server);
  auto redis = make_redis_backend(redis_server, a.blocks);
  auto ring = make_ring_backend(kvpoold_server);
  auto sock = make_socket_backend(sock_server);

  std::vector<uint64_t> hashes(a.blocks / 2);
  daemon->fill_pages(hashes);
  Backend* backends[] = {core.get(), daemon.get(), ring.get(), sock.get(), redis.get()};
  constexpr size_t kBackends = std::size(backends);
  for (Backend* b : backends) b->fill(hashes);

  std::vector<Samples> samples(kBackends);
  const int per_round = std::max(1, a.samples / a.rounds);
  for (int round = 0; round < a.rounds; ++round) {
    for (size_t k = 0; k < kBackends; ++k) {
      Backend& b = *backends[k];
      std::mt19937_64 rng(round * 7 + 1);
      for (int s = -per_round / 10; s < per_round; ++s) {  // a few warm-up samples first
        const size_t start = rng() % (hashes.size() - kBatch);
        auto t0 = Clock::now();
        b.match({hashes.data() + start, kBatch});
        const double m = us_since(t0);
        t0 = Clock::now();
        b.allocate_release();
        const double al = us_since(t0);
        t0 = Clock::now();
        b.register_release(
            static_cast<uint64_t>(round) * 1'000'000 + static_cast<uint64_t>(s + per_round), rng);
        const double rg = us_since(t0);
        if (s < 0) continue;
        samples[k].match.push_back(m);
        samples[k].allocate.push_back(al);
        samples[k].register64.push_back(rg);
      }
      if (std::getenv("COMPARE_VERBOSE")) {
        const size_t n = static_cast<size_t>(per_round);
        std::vector<double> last(samples[k].match.end() - static_cast<long>(n),
                                 samples[k].match.end());
        std::fprintf(stderr, "round %d %-12s match-64 median %8.2f us\n", round, b.name(),
                     pct(last, 0.5));
      }
    }
  }

  std::printf(
      "kvpool vs. the alternatives: pool of %u blocks (%zu registered), batches of %u,\n"
      "%d samples per backend in %d interleaved rounds; median us (ratio to in-process)\n",
      a.blocks, hashes.size(), kBatch, per_round * a.rounds, a.rounds);
  std::printf("%-26s", "operation");
  for (Backend* b : backends) std::printf(" %20s", b->name());
  std::printf("\n");
  auto row = [&](const char* label, std::vector<double> Samples::*field, double p) {
    std::printf("%-26s", label);
    const double base = pct(samples[0].*field, p);
    for (size_t k = 0; k < kBackends; ++k) {
      const double v = pct(samples[k].*field, p);
      std::printf(" %10.2f (%6.1fx)", v, base > 0 ? v / base : 0);
    }
    std::printf("\n");
  };
  row("match-64 + release", &Samples::match, 0.5);
  row("allocate-64 + release", &Samples::allocate, 0.5);
  row("register-64 + release", &Samples::register64, 0.5);
  row("match-64 p99", &Samples::match, 0.99);
  const double kv = pct(samples[1].match, 0.5);
  const double raw = pct(samples[2].match, 0.5);
  const double us = pct(samples[3].match, 0.5);
  const double rd = pct(samples[4].match, 0.5);
  std::printf(
      "match-64 median, kvpoold through libkvpool %.2f us: Redis %.2f us = %.1fx (target >= 20x), "
      "Unix-socket server %.2f us = %.1fx (target >= 5x)\n",
      kv, rd, rd / kv, us, us / kv);
  std::printf(
      "match-64 median, kvpoold's rings raw %.2f us: Redis = %.1fx, Unix-socket server = %.1fx\n",
      raw, rd / raw, us / raw);
  return 0;
}
