// kvpoolctl hash: the block and sequence hashes kvpool (and Dynamo) compute for a token
// list, to check by hand what a router or the daemon should see.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "kvpool/core/hash.hpp"
#include "kvpool/core/token_block.hpp"

namespace kvpool {
namespace {

struct HashOptions {
  Salt salt = 0;
  std::string scheme = "dynamo-0.2";
  std::string lora_name;
  std::string cache_namespace;
  bool salt_given = false;
  uint32_t page_size = 16;
  bool json = false;
  std::vector<Token> tokens;
};

void run_hash(const HashOptions& opts) {
  const auto scheme = parse_hash_scheme(opts.scheme);
  if (!scheme)
    throw CommandError("--hash-scheme must be dynamo-0.2 or dynamo-router, got '" + opts.scheme +
                       "'");
  const bool identity = !opts.lora_name.empty() || !opts.cache_namespace.empty();
  if (identity && *scheme != HashScheme::kDynamoRouter)
    throw CommandError("--lora-name and --cache-namespace need --hash-scheme dynamo-router");
  // dynamo-router: the salt is Dynamo's seed of the request's identity, unless given.
  const Salt salt = *scheme == HashScheme::kDynamoRouter && !opts.salt_given
                        ? dynamo_router_salt(opts.cache_namespace, opts.lora_name)
                        : opts.salt;
  Result<TokenBlockSequence> seq =
      TokenBlockSequence::create(opts.tokens, opts.page_size, salt, *scheme);
  if (!seq) throw CommandError(seq.status());

  if (opts.json) {
    // Decimal strings: 64-bit hashes do not survive a JSON reader that keeps numbers as
    // doubles (jq, JavaScript) -- 14643705804678351452 would come back as ...351400.
    nlohmann::json out = nlohmann::json::array();
    for (const TokenBlock& b : seq->blocks()) {
      nlohmann::json parent = nullptr;
      if (b.parent_sequence_hash) parent = std::to_string(*b.parent_sequence_hash);
      out.push_back({{"block_hash", std::to_string(b.block_hash)},
                     {"sequence_hash", std::to_string(b.sequence_hash)},
                     {"parent_hash", parent}});
    }
    std::cout << out.dump() << "\n";
  } else {
    for (const TokenBlock& b : seq->blocks()) {
      std::cout << b.block_hash << " " << b.sequence_hash << "\n";
    }
  }
  // On stderr so stdout stays exactly one record per full block.
  if (!seq->tail().empty()) {
    std::cerr << "kvpoolctl: " << seq->tail().size()
              << " trailing token(s) not hashed: they do not fill a block of page size "
              << opts.page_size << "\n";
  }
}

}  // namespace

void add_hash_command(CLI::App& app) {
  // Shared with the callback, which runs after this function has returned.
  auto opts = std::make_shared<HashOptions>();
  CLI::App* cmd = app.add_subcommand(
      "hash", "Print '<block_hash> <sequence_hash>' (decimal) for each full block of TOKENS");
  cmd->add_option("--salt", opts->salt,
                  "Hash salt (seed); Dynamo's router uses 1337. dynamo-router: default from "
                  "--lora-name / --cache-namespace")
      ->capture_default_str()
      ->each([opts](const std::string&) { opts->salt_given = true; });
  cmd->add_option("--hash-scheme", opts->scheme, "dynamo-0.2 | dynamo-router")
      ->capture_default_str();
  cmd->add_option("--lora-name", opts->lora_name, "dynamo-router: LoRA adapter of the request");
  cmd->add_option("--cache-namespace", opts->cache_namespace,
                  "dynamo-router: cache namespace of the request");
  cmd->add_option("--page-size", opts->page_size, "Tokens per block")->capture_default_str();
  cmd->add_flag("--json", opts->json,
                "Print a JSON array of {block_hash, sequence_hash, parent_hash}, each a "
                "decimal string (64-bit values)");
  cmd->add_option("tokens", opts->tokens, "Token ids");
  cmd->callback([opts] { run_hash(*opts); });
}

}  // namespace kvpool
