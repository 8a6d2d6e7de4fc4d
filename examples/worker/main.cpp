// A minimal kvpool worker: connect, look up a prompt's prefix, allocate blocks for the rest,
// fill their tokens (and KV bytes), register them, and match again. Exits 0 on success.
//   kvpool_worker [INSTANCE] [RUNTIME_DIR]
#include <unistd.h>
#include <kvpool/client.hpp>
#include <kvpool/core/token_block.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int fail(const char* what, const kvpool::Status& status) {
  std::fprintf(stderr, "kvpool_worker: %s: %s\n", what, status.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string instance = argc > 1 ? argv[1] : "default";
  kvpool::ConnectOptions options;
  if (argc > 2) options.runtime_dir = argv[2];

  auto client = kvpool::Client::connect(instance, options);
  if (!client) return fail("connect", client.status());
  auto names = client->pool_names();
  if (names.empty()) return fail("pools", kvpool::Status(kvpool::ErrorCode::kNotFound, "none"));
  auto pool = client->pool(names.front());
  if (!pool) return fail("pool", pool.status());

  // A "prompt" of three full blocks, unique to this process so the first match misses.
  const uint32_t page = pool->page_size();
  std::vector<kvpool::Token> tokens(3 * page);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<kvpool::Token>(i * 7 + static_cast<size_t>(getpid()));
  // Hashed as the pool hashes (its page size and scheme: dynamo-0.2 or dynamo-router).
  auto seq = pool->hash_tokens(tokens, /*salt=*/42);
  if (!seq) return fail("token blocks", seq.status());
  auto hashes = seq->sequence_hashes();

  auto hit = pool->match_sequence_hashes(hashes);
  if (!hit) return fail("match", hit.status());
  const size_t have = hit->size();
  auto fresh = pool->allocate_blocks(static_cast<uint32_t>(hashes.size() - have));
  if (!fresh) return fail("allocate", fresh.status());
  for (size_t k = 0; k < fresh->size(); ++k) {
    auto& block = (*fresh)[k];
    const auto& tb = seq->blocks()[have + k];
    if (auto st = block.init_sequence(42, tb.parent_sequence_hash); !st.is_ok())
      return fail("init_sequence", st);
    if (auto n = block.add_tokens(tb.tokens); !n) return fail("add_tokens", n.status());
    if (auto st = block.commit(); !st.is_ok()) return fail("commit", st);
    if (auto kv = block.address(0, 0); kv && !pool->is_device())
      std::memset(*kv, 0x5a, 16);  // where the KV data of layer 0 would go
  }
  auto registered = pool->register_blocks(std::move(*fresh));
  if (!registered) return fail("register", registered.status());

  auto again = pool->match_sequence_hashes(hashes);
  if (!again) return fail("match", again.status());
  if (again->size() != hashes.size()) {
    std::fprintf(stderr, "kvpool_worker: matched %zu of %zu blocks after registering them\n",
                 again->size(), hashes.size());
    return 1;
  }
  std::printf(
      "kvpool_worker: pool '%s': %zu block(s) matched before, %zu registered, "
      "%zu matched after\n",
      names.front().c_str(), have, registered->size(), again->size());
  return 0;
}
