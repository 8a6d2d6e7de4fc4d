// The token state of one mutable block, held client-side while a worker fills it.
//
//   Reset --init_sequence--> Partial --commit (exactly page_size tokens)--> Complete;
//   reset() from any state back to Reset. Registering consumes the MutableBlock, so no
//   BlockState reaches Registered: the value stays for the C ABI (KVPOOL_BLOCK_REGISTERED).
//
// Tokens can be added and popped only while Partial; hashes exist only once Complete, because
// a block's identity (its sequence hash) is meaningless until its tokens are final.
// Every misuse returns a Status naming the current state; nothing here aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvpool/core/hash.hpp"
#include "kvpool/core/status.hpp"

namespace kvpool {

// A registered block is no BlockState: registering consumes the MutableBlock and yields an
// ImmutableBlock (docs/design.md §1), so a Complete block's state never changes again.
enum class BlockStateKind : uint8_t { kReset, kPartial, kComplete };

// "Reset", "Partial", "Complete".
std::string_view block_state_name(BlockStateKind kind);

class BlockState {
 public:
  // `scheme`: how commit() hashes (the pool's hash scheme; kept across reset()).
  explicit BlockState(uint32_t page_size, HashScheme scheme = HashScheme::kDynamo02);

  // Reset -> Partial. `parent` is the sequence hash of the previous block of the sequence,
  // none for the first block; commit() chains to it.
  Status init_sequence(Salt salt, std::optional<SequenceHash> parent = std::nullopt);

  // Partial only. BlockFull when the block already holds page_size tokens.
  Status add_token(Token token);
  // Partial only. Adds as many tokens as fit and returns how many; BlockFull only if the
  // block was already full and `tokens` is non-empty.
  Result<size_t> add_tokens(std::span<const Token> tokens);
  // Partial only. BlockEmpty when there is no token to pop.
  Status pop_token();
  // Partial only. BlockEmpty (and nothing popped) when n exceeds the token count.
  Status pop_tokens(size_t n);

  // Partial -> Complete once exactly page_size tokens are held (else IncompleteBlock);
  // computes the block hash and the sequence hash.
  Status commit();
  // Reset -> Complete without tokens, for a copy of a block whose hashes were computed
  // where its tokens are (a peer's kvpoold sent its bytes; kvpool-peer registers them
  // here). The caller vouches for the hashes: nothing can check them without the tokens.
  Status complete_as(SequenceHash sequence_hash, BlockHash block_hash,
                     std::optional<SequenceHash> parent);
  // Any state -> Reset; forgets tokens, salt, parent and hashes.
  void reset();

  BlockStateKind kind() const { return kind_; }
  bool is_reset() const { return kind_ == BlockStateKind::kReset; }
  bool is_partial() const { return kind_ == BlockStateKind::kPartial; }
  bool is_complete() const { return kind_ == BlockStateKind::kComplete; }

  std::span<const Token> tokens() const { return tokens_; }
  uint32_t page_size() const { return page_size_; }
  Salt salt() const { return salt_; }
  HashScheme hash_scheme() const { return scheme_; }
  std::optional<SequenceHash> parent_sequence_hash() const { return parent_; }

  // Complete only, else InvalidState.
  Result<SequenceHash> sequence_hash() const;
  Result<BlockHash> block_hash() const;

 private:
  // Ok when the block is in `want`, else InvalidState "<op> needs a <want> block, block is
  // <current> (<what to do>)".
  Status require(BlockStateKind want, std::string_view op) const;
  // InvalidState for the hash accessors unless Complete.
  Status require_hashed(std::string_view op) const;

  uint32_t page_size_;
  HashScheme scheme_;
  BlockStateKind kind_ = BlockStateKind::kReset;
  Salt salt_ = 0;
  std::optional<SequenceHash> parent_;
  std::vector<Token> tokens_;
  BlockHash block_hash_ = 0;
  SequenceHash sequence_hash_ = 0;
};

}  // namespace kvpool
