// A worker for the peer-tier tests and benchmark: registers a prefix with known bytes on one
// host, or matches it (with PeerFetchOptions) on another and checks every byte it got.
//
//   peer_worker register --runtime-dir D --pool P --blocks N --seed S [--checksum]
//                        [--corrupt I]
//   peer_worker match    --runtime-dir D --pool P --blocks N --seed S --deadline-ms T
//                        [--holder host:port] [--async] [--repeat R] [--local]
// match prints one JSON line: {"asked":N,"got":K,"elapsed_ms":..,"bytes_ok":true}; exit 0
// when every block it got holds the bytes A registered (1: a wrong byte, 2: an error).
// register --checksum registers each block with its checksum (RegisterOptions::checksum);
// --corrupt I then changes a byte of block I through this worker's read-write mapping of
// the pool, as a buggy or hostile client could after registering: the pool keeps serving
// it (nothing hashes it until a check), but its bytes no longer match its checksum.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/core/token_block.hpp"

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Block i's bytes: a function of (seed, i) alone, so the other host can check them.
void fill(std::byte* p, uint64_t n, uint64_t seed, uint32_t i) {
  for (uint64_t w = 0; w * 8 < n; ++w) {
    const uint64_t v = mix(seed * 1000003 + i * 7919 + w);
    std::memcpy(p + w * 8, &v, std::min<uint64_t>(8, n - w * 8));
  }
}

bool check(const std::byte* p, uint64_t n, uint64_t seed, uint32_t i) {
  for (uint64_t w = 0; w * 8 < n; ++w) {
    const uint64_t v = mix(seed * 1000003 + i * 7919 + w);
    if (std::memcmp(p + w * 8, &v, std::min<uint64_t>(8, n - w * 8)) != 0) return false;
  }
  return true;
}

std::vector<kvpool::Token> tokens_of(uint64_t seed, uint32_t i, uint32_t page) {
  std::vector<kvpool::Token> t(page);
  for (uint32_t j = 0; j < page; ++j)
    t[j] = static_cast<kvpool::Token>(seed * 100000 + i * page + j);
  return t;
}

constexpr kvpool::Salt kSalt = 1337;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"peer_worker"};
  std::string runtime_dir, pool_name = "g1", instance = "default", holder;
  uint32_t blocks = 8, deadline_ms = 1000, repeat = 1;
  uint64_t seed = 1;
  bool async = false;
  auto add_common = [&](CLI::App* c) {
    c->add_option("--instance", instance);
    c->add_option("--runtime-dir", runtime_dir);
    c->add_option("--pool", pool_name);
    c->add_option("--blocks", blocks);
    c->add_option("--seed", seed);
  };
  auto* reg = app.add_subcommand("register");
  add_common(reg);
  bool with_checksum = false;
  int64_t corrupt = -1;
  reg->add_flag("--checksum", with_checksum, "register each block with its checksum");
  reg->add_option("--corrupt", corrupt, "after register, change a byte of this block");
  auto* match = app.add_subcommand("match");
  add_common(match);
  match->add_option("--deadline-ms", deadline_ms);
  match->add_option("--holder", holder);
  match->add_option("--repeat", repeat, "match this many times (the first may fetch)");
  match->add_flag("--async", async);
  bool local_only = false;
  match->add_flag("--local", local_only, "a plain match of this host's memory (no disk, no peer)");
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);

  kvpool::ConnectOptions co;
  co.runtime_dir = runtime_dir;
  auto client = kvpool::Client::connect(instance, co);
  if (!client) {
    std::fprintf(stderr, "connect: %s\n", client.status().to_string().c_str());
    return 2;
  }
  auto pool = client->pool(pool_name);
  if (!pool) {
    std::fprintf(stderr, "pool: %s\n", pool.status().to_string().c_str());
    return 2;
  }
  const uint32_t page = pool->page_size();
  const auto layout = *kvpool::Layout::create(pool->layout());
  const uint64_t bytes = layout.block_bytes();

  if (reg->parsed()) {
    auto mb = pool->allocate_blocks(blocks);
    if (!mb) {
      std::fprintf(stderr, "allocate: %s\n", mb.status().to_string().c_str());
      return 2;
    }
    std::optional<kvpool::SequenceHash> parent;
    std::byte* corrupt_at = nullptr;  // the read-write address, kept past the register
    uint32_t corrupt_id = 0;
    for (uint32_t i = 0; i < blocks; ++i) {
      auto& b = (*mb)[i];
      fill(*b.address(0, 0), bytes, seed, i);
      if (corrupt == static_cast<int64_t>(i)) {
        corrupt_at = *b.address(0, 0);
        corrupt_id = b.block_id();
      }
      if (!b.init_sequence(kSalt, parent).is_ok() || !b.add_tokens(tokens_of(seed, i, page)) ||
          !b.commit().is_ok())
        return 2;
      parent = *b.sequence_hash();
    }
    kvpool::RegisterOptions ro;
    ro.checksum = with_checksum;
    auto imm = pool->register_blocks(std::move(*mb), ro);
    if (!imm) {
      std::fprintf(stderr, "register: %s\n", imm.status().to_string().c_str());
      return 2;
    }
    if (corrupt_at != nullptr) {
      // Deduplicated onto a block registered before: ours went back, and is not the one served.
      if ((*imm)[static_cast<size_t>(corrupt)].block_id() != corrupt_id) {
        std::fprintf(stderr, "register: block %lld was deduplicated: pick a fresh seed\n",
                     static_cast<long long>(corrupt));
        return 2;
      }
      corrupt_at[bytes / 2] ^= std::byte{0x5a};
    }
    std::printf("{\"registered\":%zu}\n", imm->size());
    return 0;
  }

  // The same hashes A's blocks got: computed from the same tokens.
  std::vector<kvpool::SequenceHash> hashes;
  {
    std::vector<kvpool::Token> all;
    for (uint32_t i = 0; i < blocks; ++i) {
      auto t = tokens_of(seed, i, page);
      all.insert(all.end(), t.begin(), t.end());
    }
    auto s = kvpool::TokenBlockSequence::create(all, page, kSalt, pool->hash_scheme());
    if (!s) return 2;
    for (const auto& b : s->blocks()) hashes.push_back(b.sequence_hash);
  }
  kvpool::PeerFetchOptions po;
  po.deadline = std::chrono::milliseconds(deadline_ms);
  po.holder = holder;
  int rc = 0;
  for (uint32_t r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto got = local_only ? pool->match_sequence_hashes(hashes)
               : async    ? pool->match_sequence_hashes_async(hashes, po).get()
                          : pool->match_sequence_hashes(hashes, po);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!got) {
      std::fprintf(stderr, "match: %s\n", got.status().to_string().c_str());
      return 2;
    }
    bool ok = true;
    for (uint32_t i = 0; i < got->size(); ++i) {
      const auto& b = (*got)[i];
      if (b.sequence_hash() != hashes[i] || !check(*b.address(0, 0), bytes, seed, i)) ok = false;
    }
    std::printf(
        "{\"asked\":%u,\"got\":%zu,\"elapsed_ms\":%.3f,\"bytes_ok\":%s,\"block_bytes\":%llu}\n",
        blocks, got->size(), ms, ok ? "true" : "false", static_cast<unsigned long long>(bytes));
    std::fflush(stdout);
    if (!ok) rc = 1;
  }
  return rc;
}
