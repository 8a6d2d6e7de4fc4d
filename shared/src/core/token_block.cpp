#include "kvpool/core/token_block.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>

namespace kvpool {

Result<TokenBlockSequence> TokenBlockSequence::create(std::span<const Token> tokens,
                                                      uint32_t page_size, Salt salt,
                                                      HashScheme scheme) {
  if (page_size == 0) {
    return Result<TokenBlockSequence>(ErrorCode::kInvalidArgument,
                                      "page_size must be > 0 (got 0): a block holds page_size "
                                      "tokens");
  }
  TokenBlockSequence seq(page_size, salt, scheme);
  seq.extend(tokens);
  return seq;
}

void TokenBlockSequence::push_block(std::span<const Token> tokens) {
  TokenBlock block;
  block.tokens.assign(tokens.begin(), tokens.end());
  block.block_hash = compute_block_hash(tokens, salt_);
  block.parent_sequence_hash = last_sequence_hash();
  block.sequence_hash =
      compute_sequence_hash(block.parent_sequence_hash, block.block_hash, salt_, scheme_);
  blocks_.push_back(std::move(block));
}

std::optional<size_t> TokenBlockSequence::append(Token token) {
  tail_.push_back(token);
  if (tail_.size() < page_size_) return std::nullopt;
  push_block(tail_);
  tail_.clear();
  return blocks_.size() - 1;
}

size_t TokenBlockSequence::extend(std::span<const Token> tokens) {
  const size_t before = blocks_.size();
  // Top up the pending tail first; only it needs a copy.
  if (!tail_.empty()) {
    const size_t take = std::min(tokens.size(), page_size_ - tail_.size());
    tail_.insert(tail_.end(), tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(take));
    tokens = tokens.subspan(take);
    if (tail_.size() < page_size_) return 0;
    push_block(tail_);
    tail_.clear();
  }
  // Whole pages straight from the caller's span.
  while (tokens.size() >= page_size_) {
    push_block(tokens.first(page_size_));
    tokens = tokens.subspan(page_size_);
  }
  tail_.assign(tokens.begin(), tokens.end());
  return blocks_.size() - before;
}

std::vector<SequenceHash> TokenBlockSequence::sequence_hashes() const {
  std::vector<SequenceHash> out;
  out.reserve(blocks_.size());
  for (const TokenBlock& b : blocks_) out.push_back(b.sequence_hash);
  return out;
}

std::optional<SequenceHash> TokenBlockSequence::last_sequence_hash() const {
  if (blocks_.empty()) return std::nullopt;
  return blocks_.back().sequence_hash;
}

}  // namespace kvpool
