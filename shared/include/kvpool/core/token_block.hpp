// A token sequence cut into fixed-size blocks with chained hashes, as Dynamo's
// TokenBlockSequence does: each full block carries its own block hash and the sequence hash
// of the whole prefix it ends, so two requests sharing a prefix share sequence hashes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvpool/core/hash.hpp"
#include "kvpool/core/status.hpp"

namespace kvpool {

// One full block of a sequence.
struct TokenBlock {
  std::vector<Token> tokens;  // exactly page_size tokens
  BlockHash block_hash = 0;
  SequenceHash sequence_hash = 0;
  std::optional<SequenceHash> parent_sequence_hash;  // none for the first block

  friend bool operator==(const TokenBlock&, const TokenBlock&) = default;
};

class TokenBlockSequence {
 public:
  // Splits `tokens` into full blocks plus a partial tail. page_size 0 is InvalidArgument.
  // `scheme` must be the pool's (Pool::hash_scheme()) for the hashes to match its blocks.
  static Result<TokenBlockSequence> create(std::span<const Token> tokens, uint32_t page_size,
                                           Salt salt, HashScheme scheme = HashScheme::kDynamo02);

  // Full blocks, oldest first.
  const std::vector<TokenBlock>& blocks() const { return blocks_; }
  // Tokens not yet part of a full block (fewer than page_size).
  std::span<const Token> tail() const { return tail_; }

  // Adds one token; returns the index in blocks() of the block it completed, if any.
  std::optional<size_t> append(Token token);
  // Adds tokens in order; returns how many blocks they completed (the last ones of blocks()).
  size_t extend(std::span<const Token> tokens);

  // Sequence hashes of the full blocks, oldest first: what match() takes.
  std::vector<SequenceHash> sequence_hashes() const;
  // Sequence hash of the last full block: the parent of the next block.
  std::optional<SequenceHash> last_sequence_hash() const;

  size_t total_tokens() const { return blocks_.size() * page_size_ + tail_.size(); }
  uint32_t page_size() const { return page_size_; }
  Salt salt() const { return salt_; }
  HashScheme hash_scheme() const { return scheme_; }

 private:
  TokenBlockSequence(uint32_t page_size, Salt salt, HashScheme scheme)
      : page_size_(page_size), salt_(salt), scheme_(scheme) {}

  // Seals `tokens` (exactly page_size of them) as the next full block.
  void push_block(std::span<const Token> tokens);

  uint32_t page_size_;
  Salt salt_;
  HashScheme scheme_;
  std::vector<TokenBlock> blocks_;
  std::vector<Token> tail_;
};

}  // namespace kvpool
