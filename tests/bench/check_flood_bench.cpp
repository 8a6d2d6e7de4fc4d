// A victim's match latency while other clients flood kvpoold with checksum requests
// (issue 27, item 3): each flooder loops scrub steps asking for 4 MiB of hashing each (the
// daemon clamps them to its slice) over a pool of checksummed blocks. The victim matches one
// registered block, paced like an engine's step (--gap-us between calls), on its own
// connection. Prints p50 / p99 of the victim's match with 0, 1 and 16 flooders.
//   ./build/tests/bench/kvpool_check_flood_bench [--samples S] [--gap-us G]
//       [--flooders 0,1,16] [--kvpoold PATH]  (another build's daemon, for a before/after)
// No thresholds: figures for docs/performance.md, not a test.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/client.hpp"
#include "support/daemon_process.hpp"

using namespace kvpool;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kBlocks = 1024;
constexpr uint32_t kRegistered = 512;

struct Args {
  int samples = 3000;
  int gap_us = 200;
  std::vector<int> flooders{0, 1, 16};
  std::string kvpoold = KVPOOLD_PATH;
};

[[noreturn]] void fail(const std::string& what, const Status& st) {
  std::fprintf(stderr, "check_flood_bench: %s: %s\n", what.c_str(), st.to_string().c_str());
  std::exit(1);
}

Client connect(const testsupport::DaemonProcess& d) {
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  o.connect_timeout = 10s;
  auto c = Client::connect(d.instance(), o);
  if (!c) fail("connect", c.status());
  return std::move(c.value());
}

// 16 KiB blocks (2 layers x K,V x 16 tokens x 128 x 2 bytes), half of them registered with
// checksums: a scrub of the pool hashes 8 MiB.
nlohmann::json bench_config() {
  nlohmann::json layout = {{"num_layers", 2},  {"outer_dim", 2},   {"page_size", 16},
                           {"inner_dim", 128}, {"dtype_bytes", 2}, {"alignment", 64}};
  auto cfg = testsupport::test_config(
      nlohmann::json::array({{{"name", "g"}, {"num_blocks", kBlocks}, {"layout", layout}}}));
  cfg["log_level"] = "warn";
  cfg["max_clients"] = 32;  // the victim, the owner and 16 flooders
  return cfg;
}

SequenceHash fill_pool(Pool& pool, std::vector<ImmutableBlock>* keep) {
  for (uint32_t done = 0; done < kRegistered; done += 64) {
    auto blocks = pool.allocate_blocks(64);
    if (!blocks) fail("allocate", blocks.status());
    std::vector<Token> tokens(16);
    for (uint32_t i = 0; i < 64; ++i) {
      auto& b = (*blocks)[i];
      for (uint32_t t = 0; t < 16; ++t) tokens[t] = (done + i) * 131 + t;
      (void)b.init_sequence(7);
      (void)b.add_tokens(tokens);
      (void)b.commit();
    }
    auto imm = pool.register_blocks(std::move(*blocks), RegisterOptions{.checksum = true});
    if (!imm) fail("register", imm.status());
    for (auto& b : *imm) keep->push_back(b);
  }
  return (*keep)[0].sequence_hash();
}

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--samples")
      a.samples = std::atoi(v.c_str());
    else if (k == "--gap-us")
      a.gap_us = std::atoi(v.c_str());
    else if (k == "--kvpoold")
      a.kvpoold = v;
    else if (k == "--flooders") {
      a.flooders.clear();
      std::stringstream ss(v);
      for (std::string part; std::getline(ss, part, ',');) a.flooders.push_back(std::stoi(part));
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  testsupport::DaemonProcess d(bench_config(), a.kvpoold);
  d.start();
  Client owner = connect(d);
  auto pool = owner.pool("g");
  if (!pool) fail("pool", pool.status());
  std::vector<ImmutableBlock> keep;
  const SequenceHash hit = fill_pool(*pool, &keep);
  Client victim = connect(d);
  auto vpool = victim.pool("g");
  if (!vpool) fail("pool", vpool.status());

  std::printf(
      "kvpoold %s\nvictim: match of 1 block every %d us, %d samples; flooders: scrub "
      "steps of 4 MiB asked (16 KiB blocks, %u checksummed)\n",
      a.kvpoold.c_str(), a.gap_us, a.samples, kRegistered);
  std::printf("%9s %10s %10s %14s\n", "flooders", "p50 us", "p99 us", "flood steps/s");
  for (int n : a.flooders) {
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> steps{0};
    std::atomic<int> running{0};
    std::vector<std::thread> threads;
    for (int f = 0; f < n; ++f)
      threads.emplace_back([&] {
        Client c = connect(d);
        auto p = c.pool("g");
        if (!p) fail("pool", p.status());
        running.fetch_add(1);
        uint32_t start = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          auto s = p->scrub_step(start, 4u << 20);
          if (!s) fail("scrub", s.status());
          start = s->next_block >= kBlocks ? 0 : s->next_block;
          steps.fetch_add(1, std::memory_order_relaxed);
        }
      });
    while (running.load() < n) std::this_thread::sleep_for(1ms);
    const uint64_t steps0 = steps.load();
    const auto t0 = Clock::now();
    std::vector<double> us;
    us.reserve(a.samples);
    for (int i = 0; i < a.samples; ++i) {
      const auto s = Clock::now();
      auto m = vpool->match_sequence_hashes(std::vector<SequenceHash>{hit});
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
      if (!m || m->size() != 1) fail("match", m.status());
      m->clear();
      std::this_thread::sleep_until(s + std::chrono::microseconds(a.gap_us));
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const uint64_t flood = steps.load() - steps0;
    stop.store(true);
    for (auto& t : threads) t.join();
    std::printf("%9d %10.1f %10.1f %14.0f\n", n, pct(us, 0.5), pct(us, 0.99), flood / secs);
    std::fflush(stdout);
  }
  return 0;
}
