#include "kvpool/core/block_state.hpp"

#include <algorithm>
#include <string>

namespace kvpool {
namespace {

// What to do next, appended to InvalidState messages so they are actionable.
std::string_view hint_for(BlockStateKind current, BlockStateKind want) {
  if (current == BlockStateKind::kReset) return " (call init_sequence first)";
  if (want == BlockStateKind::kReset) return " (call reset first)";
  if (current == BlockStateKind::kPartial) return " (call commit first)";
  return " (its tokens are final; call reset to reuse it)";
}

std::string counts(size_t have, uint32_t page_size) {
  return std::to_string(have) + " of " + std::to_string(page_size) + " tokens";
}

}  // namespace

std::string_view block_state_name(BlockStateKind kind) {
  switch (kind) {
    case BlockStateKind::kReset:
      return "Reset";
    case BlockStateKind::kPartial:
      return "Partial";
    case BlockStateKind::kComplete:
      return "Complete";
  }
  return "Unknown";
}

BlockState::BlockState(uint32_t page_size, HashScheme scheme)
    : page_size_(page_size), scheme_(scheme) {}

Status BlockState::require(BlockStateKind want, std::string_view op) const {
  if (kind_ == want) return Status::ok();
  std::string msg(op);
  msg += " needs a ";
  msg += block_state_name(want);
  msg += " block, block is ";
  msg += block_state_name(kind_);
  msg += hint_for(kind_, want);
  return Status(ErrorCode::kInvalidState, std::move(msg));
}

Status BlockState::require_hashed(std::string_view op) const {
  if (kind_ == BlockStateKind::kComplete) return Status::ok();
  std::string msg(op);
  msg += " needs a Complete block, block is ";
  msg += block_state_name(kind_);
  msg += " (hashes exist only after commit)";
  return Status(ErrorCode::kInvalidState, std::move(msg));
}

Status BlockState::init_sequence(Salt salt, std::optional<SequenceHash> parent) {
  KVPOOL_RETURN_IF_ERROR(require(BlockStateKind::kReset, "init_sequence"));
  // The constructor cannot fail, so a zero page size is caught here, before any token
  // could be added or an empty block committed.
  if (page_size_ == 0) {
    return Status(ErrorCode::kInvalidArgument,
                  "init_sequence on a block with page_size 0: page_size must be > 0");
  }
  salt_ = salt;
  parent_ = parent;
  kind_ = BlockStateKind::kPartial;
  return Status::ok();
}

Status BlockState::add_token(Token token) {
  KVPOOL_RETURN_IF_ERROR(require(BlockStateKind::kPartial, "add_token"));
  if (tokens_.size() >= page_size_) {
    return Status(ErrorCode::kBlockFull, "add_token on a full block: it holds " +
                                             counts(tokens_.size(), page_size_) +
                                             " (commit it and continue in a new block)");
  }
  tokens_.push_back(token);
  return Status::ok();
}

Result<size_t> BlockState::add_tokens(std::span<const Token> tokens) {
  if (Status st = require(BlockStateKind::kPartial, "add_tokens"); !st.is_ok()) return st;
  const size_t room = page_size_ - tokens_.size();
  if (room == 0 && !tokens.empty()) {
    return Result<size_t>(ErrorCode::kBlockFull, "add_tokens on a full block: it holds " +
                                                     counts(tokens_.size(), page_size_) +
                                                     " (commit it and continue in a new block)");
  }
  const size_t n = std::min(room, tokens.size());
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(n));
  return n;
}

Status BlockState::pop_token() {
  KVPOOL_RETURN_IF_ERROR(require(BlockStateKind::kPartial, "pop_token"));
  return pop_tokens(1);
}

Status BlockState::pop_tokens(size_t n) {
  KVPOOL_RETURN_IF_ERROR(require(BlockStateKind::kPartial, "pop_tokens"));
  if (n > tokens_.size()) {
    return Status(ErrorCode::kBlockEmpty, "cannot pop " + std::to_string(n) +
                                              " token(s): block holds only " +
                                              counts(tokens_.size(), page_size_));
  }
  tokens_.resize(tokens_.size() - n);
  return Status::ok();
}

Status BlockState::commit() {
  KVPOOL_RETURN_IF_ERROR(require(BlockStateKind::kPartial, "commit"));
  if (tokens_.size() != page_size_) {
    return Status(ErrorCode::kIncompleteBlock,
                  "commit needs a full block, block holds " + counts(tokens_.size(), page_size_) +
                      " (add " + std::to_string(page_size_ - tokens_.size()) + " more)");
  }
  block_hash_ = compute_block_hash(tokens_, salt_);
  sequence_hash_ = compute_sequence_hash(parent_, block_hash_, salt_, scheme_);
  kind_ = BlockStateKind::kComplete;
  return Status::ok();
}

Status BlockState::complete_as(SequenceHash sequence_hash, BlockHash block_hash,
                               std::optional<SequenceHash> parent) {
  KVPOOL_RETURN_IF_ERROR(require(BlockStateKind::kReset, "complete_as"));
  parent_ = parent;
  block_hash_ = block_hash;
  sequence_hash_ = sequence_hash;
  kind_ = BlockStateKind::kComplete;
  return Status::ok();
}

void BlockState::reset() {
  kind_ = BlockStateKind::kReset;
  salt_ = 0;
  parent_.reset();
  tokens_.clear();
  block_hash_ = 0;
  sequence_hash_ = 0;
}

Result<SequenceHash> BlockState::sequence_hash() const {
  if (Status st = require_hashed("sequence_hash"); !st.is_ok()) return st;
  return sequence_hash_;
}

Result<BlockHash> BlockState::block_hash() const {
  if (Status st = require_hashed("block_hash"); !st.is_ok()) return st;
  return block_hash_;
}

}  // namespace kvpool
