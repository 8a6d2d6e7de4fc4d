#include "kvpool/core/block_state.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "unit/unit_fixtures.hpp"

namespace kvpool {
namespace {

using unit::kSalt;
constexpr uint32_t kPage = 4;
const std::vector<Token> kFirst{1, 2, 3, 4};

// A page-4 block driven into `kind`; Partial holds two tokens, the others hold [1,2,3,4].
BlockState make_in(BlockStateKind kind) {
  BlockState s(kPage);
  if (kind == BlockStateKind::kReset) return s;
  EXPECT_TRUE(s.init_sequence(kSalt).is_ok());
  if (kind == BlockStateKind::kPartial) {
    EXPECT_TRUE(s.add_token(1).is_ok());
    EXPECT_TRUE(s.add_token(2).is_ok());
    return s;
  }
  EXPECT_EQ(s.add_tokens(kFirst).value(), 4u);
  EXPECT_TRUE(s.commit().is_ok());
  return s;
}

const BlockStateKind kAllKinds[] = {BlockStateKind::kReset, BlockStateKind::kPartial,
                                    BlockStateKind::kComplete};

struct Op {
  std::string name;
  std::function<Status(BlockState&)> run;
  std::vector<BlockStateKind> allowed;  // states where it succeeds; InvalidState elsewhere
};

std::vector<Op> all_ops() {
  using K = BlockStateKind;
  const Token one[] = {9};
  return {
      {"init_sequence", [](BlockState& s) { return s.init_sequence(kSalt); }, {K::kReset}},
      {"add_token", [](BlockState& s) { return s.add_token(9); }, {K::kPartial}},
      {"add_tokens", [one](BlockState& s) { return s.add_tokens(one).status(); }, {K::kPartial}},
      {"pop_token", [](BlockState& s) { return s.pop_token(); }, {K::kPartial}},
      {"pop_tokens", [](BlockState& s) { return s.pop_tokens(1); }, {K::kPartial}},
      {"sequence_hash", [](BlockState& s) { return s.sequence_hash().status(); }, {K::kComplete}},
      {"block_hash", [](BlockState& s) { return s.block_hash().status(); }, {K::kComplete}},
  };
}

TEST(BlockState, EveryOperationInEveryState) {
  for (const Op& op : all_ops()) {
    for (BlockStateKind kind : kAllKinds) {
      SCOPED_TRACE(op.name + " in " + std::string(block_state_name(kind)));
      BlockState s = make_in(kind);
      Status st = op.run(s);
      const bool allowed =
          std::find(op.allowed.begin(), op.allowed.end(), kind) != op.allowed.end();
      if (allowed) {
        EXPECT_TRUE(st.is_ok()) << st.to_string();
      } else {
        EXPECT_EQ(st.code(), ErrorCode::kInvalidState) << st.to_string();
        // The message names the operation and the state the block is in.
        EXPECT_NE(st.message().find(op.name), std::string::npos) << st.message();
        EXPECT_NE(st.message().find(block_state_name(kind)), std::string::npos) << st.message();
        EXPECT_EQ(s.kind(), kind);  // a refused operation changes nothing
      }
    }
  }
}

TEST(BlockState, CommitOnlyFromPartial) {
  for (BlockStateKind kind : kAllKinds) {
    SCOPED_TRACE(block_state_name(kind));
    BlockState s = make_in(kind);
    Status st = s.commit();
    if (kind == BlockStateKind::kPartial) {
      EXPECT_EQ(st.code(), ErrorCode::kIncompleteBlock);  // holds 2 of 4
    } else {
      EXPECT_EQ(st.code(), ErrorCode::kInvalidState);
    }
    EXPECT_EQ(s.kind(), kind);
  }
}

TEST(BlockState, AddTokenOnResetSaysToInitSequence) {
  BlockState s(kPage);
  Status st = s.add_token(1);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidState);
  EXPECT_EQ(st.message(),
            "add_token needs a Partial block, block is Reset (call init_sequence first)");
}

TEST(BlockState, FullLifecycle) {
  BlockState s(kPage);
  EXPECT_TRUE(s.is_reset());
  EXPECT_EQ(s.page_size(), kPage);
  ASSERT_TRUE(s.init_sequence(kSalt).is_ok());
  EXPECT_TRUE(s.is_partial());
  EXPECT_EQ(s.salt(), kSalt);
  EXPECT_EQ(s.parent_sequence_hash(), std::nullopt);
  for (Token t : kFirst) ASSERT_TRUE(s.add_token(t).is_ok());
  EXPECT_EQ(std::vector<Token>(s.tokens().begin(), s.tokens().end()), kFirst);
  ASSERT_TRUE(s.commit().is_ok());
  EXPECT_TRUE(s.is_complete());
  ASSERT_TRUE(s.sequence_hash().is_ok());
  EXPECT_EQ(s.sequence_hash().value(), 14643705804678351452ull);
  EXPECT_EQ(s.block_hash().value(), 14643705804678351452ull);
}

TEST(BlockState, AddTokenOnFullBlockIsBlockFull) {
  BlockState s(kPage);
  ASSERT_TRUE(s.init_sequence(kSalt).is_ok());
  ASSERT_EQ(s.add_tokens(kFirst).value(), 4u);
  Status st = s.add_token(5);
  EXPECT_EQ(st.code(), ErrorCode::kBlockFull);
  EXPECT_NE(st.message().find("4 of 4"), std::string::npos) << st.message();
  EXPECT_EQ(s.tokens().size(), 4u);
}

TEST(BlockState, AddTokensAddsWhatFits) {
  BlockState s(kPage);
  ASSERT_TRUE(s.init_sequence(kSalt).is_ok());
  const std::vector<Token> three{1, 2, 3};
  Result<size_t> n = s.add_tokens(three);
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(*n, 3u);
  n = s.add_tokens(three);  // only one slot left
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(std::vector<Token>(s.tokens().begin(), s.tokens().end()),
            (std::vector<Token>{1, 2, 3, 1}));
  // Full: empty input is a no-op, non-empty input is BlockFull.
  n = s.add_tokens({});
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_EQ(s.add_tokens(three).status().code(), ErrorCode::kBlockFull);
}

TEST(BlockState, PopTokens) {
  BlockState s(kPage);
  ASSERT_TRUE(s.init_sequence(kSalt).is_ok());
  EXPECT_EQ(s.pop_token().code(), ErrorCode::kBlockEmpty);
  ASSERT_EQ(s.add_tokens(std::vector<Token>{1, 2, 3}).value(), 3u);
  Status st = s.pop_tokens(4);
  EXPECT_EQ(st.code(), ErrorCode::kBlockEmpty);
  EXPECT_EQ(s.tokens().size(), 3u);  // nothing popped
  ASSERT_TRUE(s.pop_tokens(2).is_ok());
  EXPECT_EQ(std::vector<Token>(s.tokens().begin(), s.tokens().end()), (std::vector<Token>{1}));
  ASSERT_TRUE(s.pop_token().is_ok());
  EXPECT_TRUE(s.tokens().empty());
  EXPECT_EQ(s.pop_token().code(), ErrorCode::kBlockEmpty);
  EXPECT_TRUE(s.pop_tokens(0).is_ok());
}

TEST(BlockState, CommitNeedsExactlyPageSizeTokens) {
  BlockState s(kPage);
  ASSERT_TRUE(s.init_sequence(kSalt).is_ok());
  Status st = s.commit();
  EXPECT_EQ(st.code(), ErrorCode::kIncompleteBlock);
  ASSERT_EQ(s.add_tokens(std::vector<Token>{1, 2, 3}).value(), 3u);
  st = s.commit();
  EXPECT_EQ(st.code(), ErrorCode::kIncompleteBlock);
  EXPECT_NE(st.message().find("3 of 4"), std::string::npos) << st.message();
  EXPECT_TRUE(s.is_partial());
  ASSERT_TRUE(s.add_token(4).is_ok());
  EXPECT_TRUE(s.commit().is_ok());
}

TEST(BlockState, ChainedCommitReproducesReferenceVector) {
  BlockState first(kPage);
  ASSERT_TRUE(first.init_sequence(kSalt).is_ok());
  ASSERT_EQ(first.add_tokens(kFirst).value(), 4u);
  ASSERT_TRUE(first.commit().is_ok());

  BlockState second(kPage);
  ASSERT_TRUE(second.init_sequence(kSalt, first.sequence_hash().value()).is_ok());
  EXPECT_EQ(second.parent_sequence_hash(), 14643705804678351452ull);
  ASSERT_EQ(second.add_tokens(std::vector<Token>{5, 6, 7, 8}).value(), 4u);
  ASSERT_TRUE(second.commit().is_ok());
  EXPECT_EQ(second.block_hash().value(), 16777012769546811212ull);
  EXPECT_EQ(second.sequence_hash().value(), 4945711292740353085ull);
}

TEST(BlockState, ResetFromEveryState) {
  for (BlockStateKind kind : kAllKinds) {
    SCOPED_TRACE(block_state_name(kind));
    BlockState s = make_in(kind);
    s.reset();
    EXPECT_TRUE(s.is_reset());
    EXPECT_TRUE(s.tokens().empty());
    EXPECT_EQ(s.salt(), 0u);
    EXPECT_EQ(s.parent_sequence_hash(), std::nullopt);
    EXPECT_EQ(s.sequence_hash().status().code(), ErrorCode::kInvalidState);
    // Usable again from scratch.
    EXPECT_TRUE(s.init_sequence(kSalt, 7).is_ok());
    EXPECT_EQ(s.parent_sequence_hash(), 7u);
  }
}

TEST(BlockState, ZeroPageSizeIsRefusedAtInit) {
  BlockState s(0);
  Status st = s.init_sequence(kSalt);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(s.is_reset());
}

TEST(BlockState, NamesAreStable) {
  EXPECT_EQ(block_state_name(BlockStateKind::kReset), "Reset");
  EXPECT_EQ(block_state_name(BlockStateKind::kPartial), "Partial");
  EXPECT_EQ(block_state_name(BlockStateKind::kComplete), "Complete");
}

}  // namespace
}  // namespace kvpool
