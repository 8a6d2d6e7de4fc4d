// In-process pool core: the registry operations a worker issues per request.
//   ./build/tests/bench/kvpool_core_bench
// Pools of 100k and 1M blocks, every block registered; times are per call of 64 blocks.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "kvpool/pool/pool_core.hpp"

namespace kvpool::pool {
namespace {

constexpr uint32_t kBatch = 64;

struct Fixture {
  explicit Fixture(uint32_t n) : rng(n) {
    PoolCoreConfig c{n, 4, 0};
    bytes = *PoolCore::arena_bytes(c);
    mem.reset(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    core = std::move(PoolCore::create(mem.get(), bytes, c).value());
    // Fill: every block registered under a random hash, then returned (inactive).
    std::vector<BlockRef> blocks(n), out(n);
    (void)core.allocate(0, n, blocks.data());
    std::vector<RegisterItem> items(n);
    hashes.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      hashes[i] = rng();
      items[i] = RegisterItem{blocks[i], hashes[i], hashes[i] ^ 1, 0, 0, 0};
    }
    (void)core.register_blocks(0, items, out.data());
    (void)core.release_immutable(0, out);
  }
  std::vector<uint64_t> random_query() {
    std::vector<uint64_t> q(kBatch);
    for (auto& h : q) h = hashes[rng() % hashes.size()];
    return q;
  }
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::mt19937_64 rng;
  size_t bytes = 0;
  std::unique_ptr<char, Free> mem;
  PoolCore core;
  std::vector<uint64_t> hashes;
};

Fixture& fixture(uint32_t n) {
  static std::unique_ptr<Fixture> f;
  if (!f || f->core.num_blocks() != n) {
    f.reset();
    f = std::make_unique<Fixture>(n);
  }
  return *f;
}

// 64 registered hashes, blocks active (another owner holds them): the prefix-sharing hit.
void BM_Match64AllHit(benchmark::State& state) {
  Fixture& f = fixture(static_cast<uint32_t>(state.range(0)));
  std::vector<std::vector<uint64_t>> queries;
  for (int i = 0; i < 256; ++i) queries.push_back(f.random_query());
  std::vector<BlockRef> out(kBatch);
  for (auto& q : queries) (void)f.core.match(2, q, out.data());  // warm holds
  size_t i = 0;
  for (auto _ : state) {
    auto n = f.core.match(1, queries[i++ & 255], out.data());
    benchmark::DoNotOptimize(n);
  }
  f.core.release_owner(1);
  f.core.release_owner(2);
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void BM_Match64AllMiss(benchmark::State& state) {
  Fixture& f = fixture(static_cast<uint32_t>(state.range(0)));
  std::vector<uint64_t> q(kBatch);
  for (auto& h : q) h = f.rng() | 1;  // not registered (with overwhelming probability)
  std::vector<BlockRef> out(kBatch);
  for (auto _ : state) {
    q[0] = f.rng();
    auto n = f.core.match(1, q, out.data());
    benchmark::DoNotOptimize(n);
  }
}

// Registering 64 fresh hashes into allocated blocks (allocation and release untimed).
void BM_Register64(benchmark::State& state) {
  Fixture& f = fixture(static_cast<uint32_t>(state.range(0)));
  std::vector<BlockRef> blocks(kBatch), out(kBatch);
  std::vector<RegisterItem> items(kBatch);
  for (auto _ : state) {
    (void)f.core.allocate(0, kBatch, blocks.data());
    for (uint32_t i = 0; i < kBatch; ++i) {
      uint64_t h = f.rng();
      items[i] = RegisterItem{blocks[i], h, h ^ 1, i ? items[i - 1].sequence_hash : 0, 0, i > 0};
    }
    auto t0 = std::chrono::steady_clock::now();
    (void)f.core.register_blocks(0, items, out.data());
    auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    (void)f.core.release_immutable(0, out);
  }
}

// Allocating 64 blocks when the free list is empty: every block is an eviction.
void BM_Allocate64WithEviction(benchmark::State& state) {
  Fixture& f = fixture(static_cast<uint32_t>(state.range(0)));
  std::vector<BlockRef> blocks(kBatch), out(kBatch);
  std::vector<RegisterItem> items(kBatch);
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    (void)f.core.allocate(0, kBatch, blocks.data());
    auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    for (uint32_t i = 0; i < kBatch; ++i) {
      uint64_t h = f.rng();
      items[i] = RegisterItem{blocks[i], h, h, 0, 0, 0};
    }
    (void)f.core.register_blocks(0, items, out.data());
    (void)f.core.release_immutable(0, out);
  }
}

// Dropping the last reference of 64 registered blocks (they enter the eviction heap).
void BM_Release64(benchmark::State& state) {
  Fixture& f = fixture(static_cast<uint32_t>(state.range(0)));
  std::vector<BlockRef> out(kBatch);
  for (auto _ : state) {
    auto q = f.random_query();
    auto n = f.core.match(0, q, out.data());
    auto t0 = std::chrono::steady_clock::now();
    (void)f.core.release_immutable(0, {out.data(), *n});
    auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
}

#define KVPOOL_SIZES ->Arg(100'000)->Arg(1'000'000)
BENCHMARK(BM_Match64AllHit) KVPOOL_SIZES;
BENCHMARK(BM_Match64AllMiss) KVPOOL_SIZES;
BENCHMARK(BM_Register64)->UseManualTime() KVPOOL_SIZES;
BENCHMARK(BM_Allocate64WithEviction)->UseManualTime() KVPOOL_SIZES;
BENCHMARK(BM_Release64)->UseManualTime() KVPOOL_SIZES;

}  // namespace
}  // namespace kvpool::pool

BENCHMARK_MAIN();
