// Where a match-64 at an engine's cadence spends its time, split in two: the call (request
// out, answer read, result built) and the release of what it returned. libkvpool (RAII
// handles; dropping the result queues 64 releases and sends them as one record) against
// kvpoold's rings raw (tests/support RawConnection: the same request, then the release
// record posted by hand), alternating call by call in one process against one kvpoold, with
// the caller sleeping the gap (clock_nanosleep) before each call. Prints p50s; a benchmark,
// no thresholds. (docs/performance.md, "libkvpool against its raw rings at a cadence".)
//   kvpool_cadence_split_bench [--gaps 0,1,5,20] [--samples N] [--reps R]
// Starts its own kvpoold (KVPOOLD overrides the binary).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kvpool/client.hpp"
#include "support/daemon_process.hpp"
#include "support/raw_connection.hpp"

using namespace kvpool;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kBatch = 64;
constexpr uint32_t kRegistered = 1024;

double us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double p50(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void nap(double ms) {
  const auto ns = static_cast<long>(ms * 1e6);
  timespec t{ns / 1'000'000'000, ns % 1'000'000'000};
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &t, &t) != 0) {
  }
}

// Registers kRegistered pages at priority 1 and returns their hashes (all matchable).
std::vector<uint64_t> fill(Pool& pool) {
  std::vector<uint64_t> hashes;
  auto blocks = pool.allocate_blocks(kRegistered);
  if (!blocks) {
    std::fprintf(stderr, "fill: %s\n", blocks.status().to_string().c_str());
    std::exit(1);
  }
  for (uint32_t i = 0; i < kRegistered; ++i) {
    auto& b = (*blocks)[i];
    std::vector<Token> t(pool.page_size());
    for (size_t k = 0; k < t.size(); ++k) t[k] = static_cast<Token>(i * 131 + k);
    (void)b.init_sequence(0);
    (void)b.add_tokens(t);
    (void)b.commit();
    b.set_priority(1);
    hashes.push_back(*b.sequence_hash());
  }
  auto imm = pool.register_blocks(std::move(*blocks));
  if (!imm) {
    std::fprintf(stderr, "fill: %s\n", imm.status().to_string().c_str());
    std::exit(1);
  }
  return hashes;
}

struct Split {
  std::vector<double> call, release, all;
  void add(Clock::time_point t0, Clock::time_point t1, Clock::time_point t2) {
    call.push_back(us(t0, t1));
    release.push_back(us(t1, t2));
    all.push_back(us(t0, t2));
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> gaps = {0, 1, 5, 20};
  int samples = 300, reps = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--samples")) samples = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--gaps")) {
      gaps.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string g; std::getline(ss, g, ',');) gaps.push_back(std::atof(g.c_str()));
    }
  }
  const nlohmann::json layout = {{"num_layers", 1}, {"outer_dim", 1},   {"page_size", 16},
                                 {"inner_dim", 8},  {"dtype_bytes", 2}, {"alignment", 64}};
  const nlohmann::json config = {
      {"log_level", "warn"},
      {"pools", nlohmann::json::array(
                    {{{"name", "bench"}, {"num_blocks", 4 * kRegistered}, {"layout", layout}}})}};
  const char* kvpoold = std::getenv("KVPOOLD");
  testsupport::DaemonProcess d(config, kvpoold ? kvpoold : KVPOOLD_PATH);
  try {
    d.start(20s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  auto client = Client::connect(d.instance(), o);
  if (!client) {
    std::fprintf(stderr, "connect: %s\n", client.status().to_string().c_str());
    return 1;
  }
  auto pool = client->pool("bench");
  const std::vector<uint64_t> hashes = fill(*pool);
  client->flush();
  testsupport::RawOptions ro;
  ro.runtime_dir = d.runtime_dir();
  auto raw = testsupport::RawConnection::open(d.instance(), ro);
  if (!raw) {
    std::fprintf(stderr, "raw connect: %s\n", raw.status().to_string().c_str());
    return 1;
  }
  std::printf(
      "match-64 + release at a cadence, p50 us of %d samples a gap (x%d): call | release "
      "| both\n",
      samples, reps);
  std::printf("%8s | %23s | %23s | %8s\n", "gap ms", "libkvpool", "raw rings", "lib/raw");
  std::mt19937_64 rng(1);
  for (int r = 0; r < reps; ++r)
    for (double gap : gaps) {
      Split lib, ring;
      for (int s = 0; s < samples; ++s) {
        const size_t start = rng() % (hashes.size() - kBatch);
        const std::span<const uint64_t> q(hashes.data() + start, kBatch);
        nap(gap);
        auto t0 = Clock::now(), t1 = t0;
        {
          auto m = pool->match_sequence_hashes(q);
          t1 = Clock::now();
          if (!m || m->size() != kBatch) {
            std::fprintf(stderr, "libkvpool match missed\n");
            return 1;
          }
        }  // the result is dropped here: its 64 releases
        lib.add(t0, t1, Clock::now());
        nap(gap);
        t0 = Clock::now();
        auto m = (*raw)->call(proto::Opcode::kMatch, 0, kBatch, q.data(), q.size_bytes());
        t1 = Clock::now();
        if (!m || m->refs.size() != kBatch) {
          std::fprintf(stderr, "raw match missed\n");
          return 1;
        }
        auto posted =
            (*raw)->send(proto::Opcode::kReleaseImmutable, 0, static_cast<uint32_t>(m->refs.size()),
                         m->refs.data(), m->refs.size() * sizeof(m->refs[0]));
        if (!posted) {
          std::fprintf(stderr, "raw release: %s\n", posted.status().to_string().c_str());
          return 1;
        }
        ring.add(t0, t1, Clock::now());
      }
      std::printf("%8.1f | %6.1f %6.1f %8.1f | %6.1f %6.1f %8.1f | %7.2fx\n", gap, p50(lib.call),
                  p50(lib.release), p50(lib.all), p50(ring.call), p50(ring.release), p50(ring.all),
                  p50(ring.all) > 0 ? p50(lib.all) / p50(ring.all) : 0);
    }
  raw->reset();
  client->flush();
  d.kill(SIGTERM);
  return d.wait_exit(10s) ? 0 : 1;
}
