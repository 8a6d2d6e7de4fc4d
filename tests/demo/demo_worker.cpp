// A simulated inference worker for scripts/demo.sh: serves prompts that share system-prompt
// prefixes. Per request it matches the prompt's block hashes, checks the bytes of every
// matched block, allocates and fills the rest, registers them, holds them for a "decode"
// step and drops them. Prints key=value totals at the end (a killed worker prints nothing).
//   kvpool_demo_worker --instance I --runtime-dir D --seconds S --seed N [--pool g2]
//                      [--decode-us N] [--priorities N]
// scripts/stress.sh drives the same worker with --decode-us 0 and random priorities.
// Exit codes: 0 ok, 1 corrupt block seen, 2 cannot attach, 3 the daemon went away (with
// --reattach 1: and no kvpoold came back within 20 s), 4 a held handle failed on use.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvpool/client.hpp"
#include "kvpool/core/token_block.hpp"

using namespace kvpool;
using Clock = std::chrono::steady_clock;

namespace {

// The byte every position of a block holds: a function of its sequence hash, so any reader
// can check that a shared block still holds what its registering writer put there.
uint8_t pattern(SequenceHash h, uint64_t i) {
  return static_cast<uint8_t>((h >> ((i % 8) * 8)) ^ i);
}

}  // namespace

int main(int argc, char** argv) {
  std::string instance = "default", runtime_dir, pool_name = "g2";
  double seconds = 5;
  uint64_t seed = 1;
  uint32_t decode_us = 600, priorities = 1;
  bool reattach = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--instance")
      instance = argv[i + 1];
    else if (k == "--runtime-dir")
      runtime_dir = argv[i + 1];
    else if (k == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else if (k == "--seed")
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k == "--pool")
      pool_name = argv[i + 1];
    else if (k == "--decode-us")
      decode_us = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    else if (k == "--priorities")
      priorities = std::max(1, std::atoi(argv[i + 1]));
    else if (k == "--reattach")
      reattach = std::atoi(argv[i + 1]) != 0;
  }
  ConnectOptions o;
  o.runtime_dir = runtime_dir;
  // --reattach 1: ride through a restart of kvpoold (ConnectOptions::reattach); otherwise
  // exit 3 at its death, as the stress tool's plain restarts expect.
  o.reattach = reattach;
  // A worker started while kvpoold restarts waits for it (bounded), as a real one would.
  auto client = Client::connect(instance, o);
  for (int tries = 0; !client && tries < 500 &&
                      (client.status().code() == ErrorCode::kNotFound ||
                       client.status().code() == ErrorCode::kDaemonGone);
       ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    client = Client::connect(instance, o);
  }
  if (!client) {
    std::fprintf(stderr, "worker %llu: %s\n", static_cast<unsigned long long>(seed),
                 client.status().to_string().c_str());
    return 2;
  }
  auto pool = client->pool(pool_name);
  if (!pool) {
    std::fprintf(stderr, "worker: %s\n", pool.status().to_string().c_str());
    return 2;
  }
  const LayoutConfig& L = pool->layout();
  const uint32_t page = L.page_size;
  const uint64_t region = uint64_t{page} * L.inner_dim * L.dtype_bytes;
  std::mt19937_64 rng(seed);

  // Four system prompts of 8 blocks each, shared by every worker (same tokens, same salt).
  std::vector<std::vector<Token>> system_prompts(4);
  for (uint32_t s = 0; s < 4; ++s)
    for (uint32_t t = 0; t < 8 * page; ++t) system_prompts[s].push_back(1000 * (s + 1) + t);

  uint64_t requests = 0, prompt_blocks = 0, matched_blocks = 0, corrupt = 0, errors = 0;
  // --reattach: since the first DaemonGone of a run of them (calls fail at once while no
  // kvpoold runs; the first one after it is back reattaches).
  std::optional<std::chrono::steady_clock::time_point> gone_since;
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    std::vector<Token> prompt = system_prompts[rng() % 4];
    // A user turn: sometimes a popular follow-up (shared), mostly unique.
    uint32_t user_blocks = 1 + rng() % 4;
    uint64_t topic = rng() % 3 == 0 ? rng() % 8 : rng();
    for (uint32_t t = 0; t < user_blocks * page; ++t)
      prompt.push_back(static_cast<Token>(topic * 7919 + t));
    auto seq = TokenBlockSequence::create(prompt, page, /*salt=*/0);
    auto hashes = seq->sequence_hashes();
    ++requests;
    prompt_blocks += hashes.size();

    // kDaemonGone: kvpoold died. Without --reattach, exit 3. With it, the call failed at
    // once (a cache miss for an engine): drop this request, take an engine step's time
    // (1 ms) and go on; a later call reattaches once a kvpoold is back. 20 s of nothing but
    // DaemonGone means none came back.
    auto gone = [&](const Status& st) {
      if (st.code() != ErrorCode::kDaemonGone) return false;
      const auto now = std::chrono::steady_clock::now();
      if (!gone_since) gone_since = now;
      if (reattach && now - *gone_since < std::chrono::seconds(20)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return true;
      }
      std::fprintf(stderr, "worker %llu: %s\n", static_cast<unsigned long long>(seed),
                   st.to_string().c_str());
      std::exit(3);
    };
    auto hit = pool->match_sequence_hashes(hashes);
    if (!hit) {
      gone(hit.status());
      ++errors;
      continue;
    }
    gone_since.reset();
    matched_blocks += hit->size();
    for (auto& b : *hit) {  // a shared block holds exactly what its writer wrote
      for (uint32_t l = 0; l < L.num_layers; ++l)
        for (uint32_t o2 = 0; o2 < L.outer_dim; ++o2) {
          // Valid across a reattach too (the handles are given back, same memory); a
          // handle that was not is an error, never an address.
          auto a = b.address(l, o2);
          if (!a) {
            std::fprintf(stderr, "worker %llu: %s\n", static_cast<unsigned long long>(seed),
                         a.status().to_string().c_str());
            return 4;
          }
          const std::byte* p = *a;
          for (uint64_t i = 0; i < region; i += 97)
            if (static_cast<uint8_t>(p[i]) != pattern(b.sequence_hash(), i)) {
              ++corrupt;
              i = region;
            }
        }
    }
    const size_t matched = hit->size();
    const size_t need = hashes.size() - matched;
    std::vector<ImmutableBlock> held = std::move(*hit);
    if (need > 0) {
      auto fresh = pool->allocate_blocks(static_cast<uint32_t>(need));
      if (!fresh) {
        gone(fresh.status());
        ++errors;  // pool exhausted by held blocks: a real engine would queue the request
        continue;
      }
      for (size_t k = 0; k < need; ++k) {
        MutableBlock& b = (*fresh)[k];
        size_t idx = matched + k;
        const TokenBlock& tb = seq->blocks()[idx];
        (void)b.init_sequence(0, tb.parent_sequence_hash);
        (void)b.add_tokens(tb.tokens);
        (void)b.commit();
        b.set_priority(static_cast<uint32_t>(rng() % priorities));
        SequenceHash h = *b.sequence_hash();
        for (uint32_t l = 0; l < L.num_layers; ++l)
          for (uint32_t o2 = 0; o2 < L.outer_dim; ++o2) {
            auto a = b.address(l, o2);
            if (!a) {
              std::fprintf(stderr, "worker %llu: %s\n", static_cast<unsigned long long>(seed),
                           a.status().to_string().c_str());
              return 4;
            }
            std::byte* p = *a;
            for (uint64_t i = 0; i < region; ++i) p[i] = static_cast<std::byte>(pattern(h, i));
          }
      }
      auto reg = pool->register_blocks(std::move(*fresh));
      if (!reg) {
        gone(reg.status());
        ++errors;
        continue;
      }
      for (auto& b : *reg) held.push_back(std::move(b));
    }
    // Decode: the request keeps its blocks while it generates.
    if (decode_us)
      std::this_thread::sleep_for(std::chrono::microseconds(decode_us / 3 + rng() % decode_us));
  }
  client->flush();
  std::printf("requests=%llu prompt_blocks=%llu matched_blocks=%llu corrupt=%llu errors=%llu\n",
              static_cast<unsigned long long>(requests),
              static_cast<unsigned long long>(prompt_blocks),
              static_cast<unsigned long long>(matched_blocks),
              static_cast<unsigned long long>(corrupt), static_cast<unsigned long long>(errors));
  return corrupt == 0 ? 0 : 1;
}
