#include "kvpool/core/token_block.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "unit/unit_fixtures.hpp"

namespace kvpool {
namespace {

using unit::kSalt;

std::vector<Token> iota_tokens(Token first, size_t n) {
  std::vector<Token> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(TokenBlockSequence, RejectsZeroPageSize) {
  Result<TokenBlockSequence> seq = TokenBlockSequence::create(iota_tokens(1, 4), 0, kSalt);
  ASSERT_FALSE(seq.is_ok());
  EXPECT_EQ(seq.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(seq.status().message().find("page_size"), std::string::npos);
}

TEST(TokenBlockSequence, SplitsIntoChainedBlocksAndTail) {
  Result<TokenBlockSequence> seq = TokenBlockSequence::create(iota_tokens(1, 14), 4, kSalt);
  ASSERT_TRUE(seq.is_ok());
  ASSERT_EQ(seq->blocks().size(), 3u);
  EXPECT_EQ(seq->blocks()[0].tokens, iota_tokens(1, 4));
  EXPECT_EQ(seq->blocks()[2].tokens, iota_tokens(9, 4));
  EXPECT_EQ(std::vector<Token>(seq->tail().begin(), seq->tail().end()),
            (std::vector<Token>{13, 14}));
  EXPECT_EQ(seq->total_tokens(), 14u);

  EXPECT_EQ(seq->blocks()[0].parent_sequence_hash, std::nullopt);
  EXPECT_EQ(seq->blocks()[1].block_hash, 16777012769546811212ull);
  EXPECT_EQ(seq->blocks()[1].parent_sequence_hash, 14643705804678351452ull);
  EXPECT_EQ(seq->blocks()[2].block_hash, 483935686894639516ull);
  EXPECT_EQ(seq->blocks()[2].parent_sequence_hash, 4945711292740353085ull);
  EXPECT_EQ(seq->sequence_hashes(),
            (std::vector<SequenceHash>{14643705804678351452ull, 4945711292740353085ull,
                                       12583592247330656132ull}));
  EXPECT_EQ(seq->last_sequence_hash(), 12583592247330656132ull);
}

TEST(TokenBlockSequence, EmptyInput) {
  Result<TokenBlockSequence> seq = TokenBlockSequence::create({}, 4, kSalt);
  ASSERT_TRUE(seq.is_ok());
  EXPECT_TRUE(seq->blocks().empty());
  EXPECT_TRUE(seq->tail().empty());
  EXPECT_EQ(seq->total_tokens(), 0u);
  EXPECT_TRUE(seq->sequence_hashes().empty());
  EXPECT_EQ(seq->last_sequence_hash(), std::nullopt);
}

TEST(TokenBlockSequence, AppendCompletesBlocksAsTheyFill) {
  Result<TokenBlockSequence> seq = TokenBlockSequence::create({}, 4, kSalt);
  ASSERT_TRUE(seq.is_ok());
  for (Token t = 1; t <= 3; ++t) EXPECT_EQ(seq->append(t), std::nullopt);
  EXPECT_EQ(seq->tail().size(), 3u);
  EXPECT_EQ(seq->append(4), 0u);
  EXPECT_TRUE(seq->tail().empty());
  for (Token t = 5; t <= 7; ++t) EXPECT_EQ(seq->append(t), std::nullopt);
  EXPECT_EQ(seq->append(8), 1u);
  EXPECT_EQ(seq->blocks()[1].sequence_hash, 4945711292740353085ull);
  EXPECT_EQ(seq->total_tokens(), 8u);
}

TEST(TokenBlockSequence, ExtendMatchesOneShotConstruction) {
  const std::vector<Token> all = iota_tokens(1, 23);
  Result<TokenBlockSequence> whole = TokenBlockSequence::create(all, 4, kSalt);
  ASSERT_TRUE(whole.is_ok());

  // Feed the same tokens in uneven pieces, some smaller and some larger than a page.
  Result<TokenBlockSequence> pieces = TokenBlockSequence::create({}, 4, kSalt);
  ASSERT_TRUE(pieces.is_ok());
  std::span<const Token> rest(all);
  size_t completed = 0;
  for (size_t n : {1u, 2u, 6u, 0u, 9u, 5u}) {
    completed += pieces->extend(rest.first(n));
    rest = rest.subspan(n);
  }
  ASSERT_TRUE(rest.empty());
  EXPECT_EQ(completed, 5u);
  EXPECT_EQ(pieces->blocks(), whole->blocks());
  EXPECT_EQ(std::vector<Token>(pieces->tail().begin(), pieces->tail().end()),
            std::vector<Token>(whole->tail().begin(), whole->tail().end()));
  EXPECT_EQ(pieces->total_tokens(), 23u);
}

TEST(TokenBlockSequence, ExtendReportsBlocksCompletedByThisCall) {
  Result<TokenBlockSequence> seq = TokenBlockSequence::create(iota_tokens(1, 3), 4, kSalt);
  ASSERT_TRUE(seq.is_ok());
  EXPECT_EQ(seq->extend(iota_tokens(4, 1)), 1u);
  EXPECT_EQ(seq->extend(iota_tokens(5, 2)), 0u);
  EXPECT_EQ(seq->extend(iota_tokens(7, 10)), 3u);
  EXPECT_EQ(seq->blocks().size(), 4u);
}

TEST(TokenBlockSequence, SaltChangesSequenceHashes) {
  Result<TokenBlockSequence> a = TokenBlockSequence::create(iota_tokens(1, 8), 4, 1);
  Result<TokenBlockSequence> b = TokenBlockSequence::create(iota_tokens(1, 8), 4, 2);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_NE(a->sequence_hashes(), b->sequence_hashes());
}

TEST(TokenBlockSequence, PageSizeOneMakesOneBlockPerToken) {
  Result<TokenBlockSequence> seq = TokenBlockSequence::create(iota_tokens(1, 3), 1, kSalt);
  ASSERT_TRUE(seq.is_ok());
  EXPECT_EQ(seq->blocks().size(), 3u);
  EXPECT_TRUE(seq->tail().empty());
}

}  // namespace
}  // namespace kvpool
