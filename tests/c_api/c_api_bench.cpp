// match-64 round trips (match + drop the result) through the C ABI and through the C++ API,
// in one process against one kvpoold, in short chunks of each back to back, so both see the
// same machine. Prints the medians of wall-clock and client CPU time per call, and of the
// per-pair differences: the C ABI's overhead (target: at most 0.2 us).
//
//   kvpool_c_api_bench <kvpoold> [--rounds PAIRS] [--calls N_PER_CHUNK]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/core/token_block.hpp"
#include "kvpool/kvpool.h"
#include "test_daemon.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "c_api_bench: %s\n", what.c_str());
  std::exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: kvpool_c_api_bench <kvpoold> [--rounds R] [--calls N]");
  int rounds = 201;
  long calls = 500;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rounds") == 0)
      rounds = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--calls") == 0)
      calls = std::atol(argv[i + 1]);
    else
      die(std::string("unknown option ") + argv[i]);
  }
  const uint32_t kBlocks = 64;
  test_daemon d;
  const char* pools =
      "[{\"name\": \"g\", \"num_blocks\": 256, \"layout\": {\"num_layers\": 2, \"outer_dim\": 2,"
      " \"page_size\": 16, \"inner_dim\": 64, \"dtype_bytes\": 2, \"alignment\": 256}}]";
  if (test_daemon_start(&d, argv[1], pools) != 0) die("kvpoold did not start");

  // A registered chain of 64 blocks to match, made through the C++ API.
  kvpool::ConnectOptions o;
  o.runtime_dir = d.dir;
  o.poll_us = 0;
  auto client = kvpool::Client::connect(d.instance, o);
  if (!client) die("connect: " + client.status().to_string());
  auto pool = client->pool("g");
  std::vector<uint32_t> tokens(kBlocks * 16);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i);
  auto seq = kvpool::TokenBlockSequence::create(tokens, 16, 0);
  auto hashes = seq->sequence_hashes();
  auto fresh = pool->allocate_blocks(kBlocks);
  if (!fresh) die("allocate: " + fresh.status().to_string());
  for (uint32_t k = 0; k < kBlocks; ++k) {
    auto& b = (*fresh)[k];
    const auto& tb = seq->blocks()[k];
    (void)b.init_sequence(0, tb.parent_sequence_hash);
    (void)b.add_tokens(tb.tokens);
    (void)b.commit();
  }
  auto shared = pool->register_blocks(std::move(*fresh));
  if (!shared) die("register: " + shared.status().to_string());

  kvpool_connect_options co;
  kvpool_connect_options_init(&co);
  co.runtime_dir = d.dir;
  co.poll_us = 0;
  kvpool_client* cc = nullptr;
  kvpool_pool* cp = nullptr;
  if (kvpool_connect(d.instance, &co, &cc) != KVPOOL_OK || kvpool_client_pool(cc, "g", &cp))
    die(std::string("C connect: ") + kvpool_last_error_message());

  // Per chunk: wall-clock and this thread's CPU time per call. The client parks at once
  // (poll_us 0) so that its CPU time is its own work, not spinning: the C layer's
  // cost shows there without the daemon's scheduling noise that dominates wall time on a
  // busy machine.
  struct Times {
    double wall_us, cpu_us;
  };
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) / 1e3;
  };
  auto cpp_round = [&](long n) {
    auto t0 = Clock::now();
    double c0 = cpu_now();
    for (long i = 0; i < n; ++i) {
      auto r = pool->match_sequence_hashes(hashes);
      if (!r || r->size() != kBlocks) die("C++ match missed");
    }
    return Times{std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n,
                 (cpu_now() - c0) / n};
  };
  auto c_round = [&](long n) {
    auto t0 = Clock::now();
    double c0 = cpu_now();
    for (long i = 0; i < n; ++i) {
      kvpool_immutable_batch* hit = nullptr;
      if (kvpool_pool_match(cp, hashes.data(), hashes.size(), &hit) != KVPOOL_OK ||
          kvpool_immutable_batch_size(hit) != kBlocks)
        die("C match missed");
      kvpool_immutable_batch_release(hit);
    }
    return Times{std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n,
                 (cpu_now() - c0) / n};
  };
  cpp_round(500);  // warm up both paths
  c_round(500);
  // Short chunks, C++ and C back to back (alternating which goes first): the machine's
  // drift hits both halves of a pair alike, and the median of the pairs' differences is the
  // overhead (robust to the noise of a shared 2-core VM).
  std::vector<double> cpp_wall, c_wall, diff_wall, cpp_cpu, c_cpu, diff_cpu;
  for (int r = 0; r < rounds; ++r) {
    Times a, b;
    if (r % 2 == 0) {
      a = cpp_round(calls);
      b = c_round(calls);
    } else {
      b = c_round(calls);
      a = cpp_round(calls);
    }
    cpp_wall.push_back(a.wall_us);
    c_wall.push_back(b.wall_us);
    diff_wall.push_back(b.wall_us - a.wall_us);
    cpp_cpu.push_back(a.cpu_us);
    c_cpu.push_back(b.cpu_us);
    diff_cpu.push_back(b.cpu_us - a.cpu_us);
  }
  std::printf("match-64 (match + release), %d pairs x %ld calls, medians per call:\n", rounds,
              calls);
  std::printf("  wall clock:        C++ %.3f us, C ABI %.3f us, C - C++ %+.3f us\n",
              median(cpp_wall), median(c_wall), median(diff_wall));
  std::printf(
      "  client CPU time:   C++ %.3f us, C ABI %.3f us, C - C++ %+.3f us  (C ABI overhead)\n",
      median(cpp_cpu), median(c_cpu), median(diff_cpu));
  kvpool_pool_release(cp);
  kvpool_client_release(cc);
  test_daemon_stop(&d);
  return 0;
}
