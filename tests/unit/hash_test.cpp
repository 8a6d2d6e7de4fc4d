#include "kvpool/core/hash.hpp"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "kvpool/core/token_block.hpp"
#include "unit/unit_fixtures.hpp"

namespace kvpool {
namespace {

using unit::kSalt;

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

// dynamo-router vectors, computed outside this code base with python3-xxhash from the
// scheme's definition (Dynamo's kv-hashing compute_salt_hash and kv-router
// compute_block_hash_for_seq / compute_next_sequence_hash):
//   salt  = 1337 + xxh3_64(lora, seed=0) + xxh3_64(namespace, seed=1)   (mod 2^64)
//   block = xxh3_64(struct.pack('<4I', *tokens), seed=salt)
//   seq   = block, then xxh3_64(struct.pack('<QQ', parent, block), seed=1337)
// tests/events/vllm_subscriber.py recomputes the same at test time against kvpoolctl hash.
struct RouterVector {
  const char* ns;
  const char* lora;
  Salt salt;
  std::array<std::array<uint64_t, 2>, 3> blocks;  // {block_hash, sequence_hash}
};
constexpr RouterVector kRouterVectors[] = {
    {"",
     "",
     1337ull,
     {{{14643705804678351452ull, 14643705804678351452ull},
       {16777012769546811212ull, 4945711292740353085ull},
       {483935686894639516ull, 12583592247330656132ull}}}},
    {"",
     "adapter-a",
     8842669519798868182ull,
     {{{11381080598872079209ull, 11381080598872079209ull},
       {5698110331184095209ull, 17518568667535815909ull},
       {10923852707342720619ull, 12857975441449519705ull}}}},
    {"tenant-1",
     "",
     13131544620552358486ull,
     {{{12236259103925738072ull, 12236259103925738072ull},
       {16244233118725531467ull, 10698633946847767502ull},
       {4497460056394060481ull, 550018042094590973ull}}}},
    {"tenant-1",
     "adapter-a",
     3527470066641673715ull,
     {{{5419529179100330851ull, 5419529179100330851ull},
       {8208374588024910845ull, 17491403834204085147ull},
       {7722235285175337274ull, 15941722287749655613ull}}}},
};

TEST(HashScheme, DynamoRouterVectorsWithLoraAndNamespace) {
  const std::vector<Token> tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  for (const RouterVector& v : kRouterVectors) {
    SCOPED_TRACE(std::string("namespace '") + v.ns + "', lora '" + v.lora + "'");
    const Salt salt = dynamo_router_salt(v.ns, v.lora);
    EXPECT_EQ(salt, v.salt);
    auto seq = TokenBlockSequence::create(tokens, 4, salt, HashScheme::kDynamoRouter);
    ASSERT_TRUE(seq.is_ok());
    ASSERT_EQ(seq->blocks().size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(seq->blocks()[i].block_hash, v.blocks[i][0]) << "block " << i;
      EXPECT_EQ(seq->blocks()[i].sequence_hash, v.blocks[i][1]) << "block " << i;
    }
  }
}

TEST(HashScheme, SchemesAgreeOnDynamosSeedAndDifferInTheChainOtherwise) {
  const std::vector<Token> tokens{1, 2, 3, 4, 5, 6, 7, 8};
  auto a = TokenBlockSequence::create(tokens, 4, kDynamoSeed, HashScheme::kDynamo02);
  auto b = TokenBlockSequence::create(tokens, 4, kDynamoSeed, HashScheme::kDynamoRouter);
  EXPECT_EQ(a->sequence_hashes(), b->sequence_hashes());
  // Another salt: same block hashes, but dynamo-0.2 chains with the salt, dynamo-router
  // with 1337.
  auto c = TokenBlockSequence::create(tokens, 4, 7, HashScheme::kDynamo02);
  auto d = TokenBlockSequence::create(tokens, 4, 7, HashScheme::kDynamoRouter);
  EXPECT_EQ(c->blocks()[1].block_hash, d->blocks()[1].block_hash);
  EXPECT_EQ(c->blocks()[0].sequence_hash, d->blocks()[0].sequence_hash);
  EXPECT_NE(c->blocks()[1].sequence_hash, d->blocks()[1].sequence_hash);
  EXPECT_EQ(d->blocks()[1].sequence_hash,
            compute_sequence_hash(d->blocks()[0].sequence_hash, d->blocks()[1].block_hash,
                                  kDynamoSeed, HashScheme::kDynamo02));
}

TEST(HashScheme, NamesRoundTripAndUnknownOnesAreRefused) {
  for (HashScheme s : {HashScheme::kDynamo02, HashScheme::kDynamoRouter})
    EXPECT_EQ(parse_hash_scheme(hash_scheme_name(s)), s);
  EXPECT_EQ(hash_scheme_name(HashScheme::kDynamo02), "dynamo-0.2");
  EXPECT_EQ(hash_scheme_name(HashScheme::kDynamoRouter), "dynamo-router");
  EXPECT_EQ(parse_hash_scheme("universal"), std::nullopt);
  EXPECT_EQ(hash_scheme_name(static_cast<HashScheme>(7)), "unknown");
  // Empty strings count as absent, as in Dynamo.
  EXPECT_EQ(dynamo_router_salt("", ""), kDynamoSeed);
}

}  // namespace
}  // namespace kvpool
