#include "kvpool/core/hash.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvpool {
namespace {

constexpr Salt kSalt = 1337;

// Reference vectors from Dynamo's block manager (salt 1337, page size 4).
TEST(Hash, DynamoReferenceVectors) {
  const std::vector<Token> b0{1, 2, 3, 4};
  const std::vector<Token> b1{5, 6, 7, 8};
  const std::vector<Token> b2{9, 10, 11, 12};

  const BlockHash h0 = compute_block_hash(b0, kSalt);
  const SequenceHash s0 = compute_sequence_hash(std::nullopt, h0, kSalt);
  EXPECT_EQ(s0, 14643705804678351452ull);
  EXPECT_EQ(h0, s0);  // first block: sequence hash is the block hash

  const BlockHash h1 = compute_block_hash(b1, kSalt);
  EXPECT_EQ(h1, 16777012769546811212ull);
  const SequenceHash s1 = compute_sequence_hash(s0, h1, kSalt);
  EXPECT_EQ(s1, 4945711292740353085ull);

  const BlockHash h2 = compute_block_hash(b2, kSalt);
  EXPECT_EQ(h2, 483935686894639516ull);
  EXPECT_EQ(compute_sequence_hash(s1, h2, kSalt), 12583592247330656132ull);
}

TEST(Hash, EmptyTokenListHashesLikeEmptyInput) {
  const std::vector<Token> none;
  const BlockHash h = compute_block_hash(none, kSalt);
  EXPECT_EQ(h, compute_block_hash(std::span<const Token>(), kSalt));
  EXPECT_NE(h, compute_block_hash(std::vector<Token>{0}, kSalt));
}

TEST(Hash, SaltChangesHashes) {
  const std::vector<Token> t{1, 2, 3, 4};
  EXPECT_NE(compute_block_hash(t, 1337), compute_block_hash(t, 1338));
  EXPECT_NE(compute_block_hash(t, 0), compute_block_hash(t, 1337));
  EXPECT_NE(compute_sequence_hash(1, 2, 1337), compute_sequence_hash(1, 2, 1338));
}

TEST(Hash, SequenceHashDependsOnParentAndOrder) {
  EXPECT_EQ(compute_sequence_hash(std::nullopt, 42, kSalt), 42u);
  EXPECT_NE(compute_sequence_hash(1, 2, kSalt), compute_sequence_hash(2, 1, kSalt));
  EXPECT_NE(compute_sequence_hash(0, 42, kSalt), 42u);  // a zero parent is still a parent
}

TEST(Hash, TokenOrderMatters) {
  EXPECT_NE(compute_block_hash(std::vector<Token>{1, 2}, kSalt),
            compute_block_hash(std::vector<Token>{2, 1}, kSalt));
}

}  // namespace
}  // namespace kvpool
