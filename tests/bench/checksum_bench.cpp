// What per-block checksums cost (RegisterOptions::checksum, Pool::verify_blocks,
// kvpoolctl scrub), against a kvpoold it starts, with blocks of a real model's shape.
//   ./build/tests/bench/kvpool_checksum_bench [--layers L] [--inner I] [--page P]
//                                            [--blocks N] [--samples S]
// Default block: 8 layers x K,V x 16 tokens x 1024 (8 KV heads x 128) x 2 bytes = 512 KiB.
// Prints medians; no thresholds (a figure for the README, not a test).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/core/checksum.hpp"
#include "support/daemon_process.hpp"

using namespace kvpool;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kBatch = 64;

struct Args {
  uint32_t layers = 8, inner = 1024, page = 16, blocks = 256;
  int samples = 30;
};

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// kvpoold's config: one pool of the benchmark's blocks.
nlohmann::json bench_config(const Args& a) {
  nlohmann::json layout = {{"num_layers", a.layers}, {"outer_dim", 2},   {"page_size", a.page},
                           {"inner_dim", a.inner},   {"dtype_bytes", 2}, {"alignment", 64}};
  return {{"log_level", "warn"},
          {"pools", nlohmann::json::array(
                        {{{"name", "bench"}, {"num_blocks", a.blocks}, {"layout", layout}}})}};
}

// allocate-64, fill every byte, commit, register (with or without checksums), release.
double register64(Pool& pool, uint64_t salt, bool checksum, std::vector<ImmutableBlock>* keep) {
  auto blocks = pool.allocate_blocks(kBatch);
  if (!blocks) {
    std::fprintf(stderr, "allocate: %s\n", blocks.status().to_string().c_str());
    std::exit(1);
  }
  const LayoutConfig& l = pool.layout();
  std::vector<Token> tokens(l.page_size);
  for (uint32_t i = 0; i < kBatch; ++i) {
    auto& b = (*blocks)[i];
    for (uint32_t layer = 0; layer < l.num_layers; ++layer)
      for (uint32_t outer = 0; outer < 2; ++outer)
        std::memset(*b.address(layer, outer), static_cast<int>(salt + i),
                    uint64_t{l.page_size} * l.inner_dim * 2);
    for (uint32_t t = 0; t < l.page_size; ++t) tokens[t] = static_cast<Token>(i * 131 + t);
    (void)b.init_sequence(salt);
    (void)b.add_tokens(tokens);
    (void)b.commit();
  }
  // Timed from here: what the option adds is the hashing inside register_blocks.
  auto t0 = Clock::now();
  auto imm = checksum ? pool.register_blocks(std::move(*blocks), RegisterOptions{.checksum = true})
                      : pool.register_blocks(std::move(*blocks));
  double us = us_since(t0);
  if (!imm) {
    std::fprintf(stderr, "register: %s\n", imm.status().to_string().c_str());
    std::exit(1);
  }
  if (keep) *keep = std::move(*imm);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const auto v = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--layers")) a.layers = v;
    if (!std::strcmp(argv[i], "--inner")) a.inner = v;
    if (!std::strcmp(argv[i], "--page")) a.page = v;
    if (!std::strcmp(argv[i], "--blocks")) a.blocks = v;
    if (!std::strcmp(argv[i], "--samples")) a.samples = static_cast<int>(v);
  }
  const char* kvpoold = std::getenv("KVPOOLD");
  testsupport::DaemonProcess d(bench_config(a), kvpoold ? kvpoold : KVPOOLD_PATH);
  try {
    d.start(30s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  ConnectOptions o;
  o.runtime_dir = d.runtime_dir();
  auto client = Client::connect(d.instance(), o);
  if (!client) {
    std::fprintf(stderr, "cannot reach kvpoold: %s\n", client.status().to_string().c_str());
    return 1;
  }
  auto pool = client->pool("bench");
  const uint64_t block_bytes = uint64_t{a.layers} * 2 * a.page * a.inner * 2;
  std::vector<double> plain, summed, verify;
  for (int s = 0; s < a.samples; ++s) {
    plain.push_back(register64(*pool, 2 * s, false, nullptr));
    std::vector<ImmutableBlock> held;
    summed.push_back(register64(*pool, 2 * s + 1, true, &held));
    auto t0 = Clock::now();
    auto v = pool->verify_blocks(held);
    verify.push_back(us_since(t0));
    if (!v) std::fprintf(stderr, "verify: %s\n", v.status().to_string().c_str());
  }
  // A scrub of everything registered (inactive now), as kvpoolctl scrub does it.
  auto t0 = Clock::now();
  uint64_t checked = 0, steps = 0;
  for (uint32_t start = 0; start < a.blocks; ++steps) {
    auto st = pool->scrub_step(start);
    if (!st) break;
    checked += st->checked;
    start = st->next_block;
  }
  const double scrub_us = us_since(t0);

  const double mib = static_cast<double>(kBatch * block_bytes) / (1 << 20);
  std::printf(
      "per-block checksums: blocks of %llu KiB (%u layers x K,V x %u tokens x %u x 2 B), "
      "batches of %u (%.0f MiB), %d samples, medians\n",
      static_cast<unsigned long long>(block_bytes >> 10), a.layers, a.page, a.inner, kBatch, mib,
      a.samples);
  const double p = median(plain), c = median(summed), vm = median(verify);
  std::printf("  register-64 without checksums   %10.1f us\n", p);
  std::printf("  register-64 with checksums      %10.1f us  (+%.1f us, %.2f GiB/s hashed)\n", c,
              c - p, mib / 1024 / ((c - p) / 1e6));
  std::printf("  verify-64 (kvpoold hashes)      %10.1f us  (%.2f GiB/s)\n", vm,
              mib / 1024 / (vm / 1e6));
  std::printf("  scrub of %llu blocks             %10.1f us in %llu requests\n",
              static_cast<unsigned long long>(checked), scrub_us,
              static_cast<unsigned long long>(steps));
  d.kill(SIGTERM);
  return d.wait_exit(10s) ? 0 : 1;
}
