// plan_block_copies: which byte ranges copy_blocks moves, and that executing a plan moves
// exactly every region of every listed block (checked region by region against Layout).
#include "kvpool/core/copy_plan.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace kvpool {
namespace {

LayoutConfig config(LayoutKind kind, uint32_t blocks, uint32_t alignment = 1, uint32_t layers = 2,
                    uint32_t outer = 2) {
  return LayoutConfig{.num_blocks = blocks,
                      .num_layers = layers,
                      .outer_dim = outer,
                      .page_size = 4,
                      .inner_dim = 8,
                      .dtype_bytes = 2,
                      .alignment = alignment,
                      .kind = kind};
}

Layout make(const LayoutConfig& c) { return Layout::create(c).value(); }

std::vector<CopyOp> plan(const Layout& s, std::vector<uint32_t> si, const Layout& d,
                         std::vector<uint32_t> di, uint64_t max_pitch = kMaxCopyPitch) {
  auto p = plan_block_copies(s, si, d, di, false, max_pitch);
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return p.is_ok() ? p.value() : std::vector<CopyOp>{};
}

// Fills a pool image with bytes that differ per position, runs the plan with memcpy, and
// checks every region of every copied block equals its source and nothing else changed.
void check_semantics(const Layout& s, const std::vector<uint32_t>& si, const Layout& d,
                     const std::vector<uint32_t>& di, uint64_t max_pitch = kMaxCopyPitch) {
  std::vector<std::byte> src(s.total_bytes()), dst(d.total_bytes());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>((i * 7 + 3) & 0xff);
  for (size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<std::byte>(0xEE);
  std::vector<std::byte> before = dst;
  auto ops = plan(s, si, d, di, max_pitch);
  copy_on_host(ops, src.data(), dst.data());
  std::vector<bool> touched(dst.size(), false);
  const uint64_t region = s.region_bytes();
  for (size_t k = 0; k < si.size(); ++k) {
    for (uint32_t l = 0; l < s.config().num_layers; ++l) {
      for (uint32_t o = 0; o < s.config().outer_dim; ++o) {
        uint64_t so = s.offset(si[k], l, o).value();
        uint64_t dof = d.offset(di[k], l, o).value();
        ASSERT_EQ(0, std::memcmp(src.data() + so, dst.data() + dof, region))
            << "block " << si[k] << " -> " << di[k] << " layer " << l << " outer " << o;
        for (uint64_t b = 0; b < region; ++b) touched[dof + b] = true;
      }
    }
  }
  for (size_t i = 0; i < dst.size(); ++i) {
    if (!touched[i]) {
      ASSERT_EQ(before[i], dst[i]) << "byte " << i << " outside the copied blocks";
    }
  }
}

TEST(CopyPlan, ConsecutiveFullyContiguousBlocksWithoutPaddingAreOneFlatCopy) {
  Layout l = make(config(LayoutKind::kFullyContiguous, 16));  // 256-byte blocks, no padding
  auto ops = plan(l, {4, 5, 6, 7}, l, {0, 1, 2, 3});
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_TRUE(ops[0].flat());
  EXPECT_EQ(ops[0].bytes(), 4 * l.block_bytes());
  EXPECT_EQ(ops[0].src_offset, 4 * l.block_bytes());
  EXPECT_EQ(ops[0].dst_offset, 0u);
  check_semantics(l, {4, 5, 6, 7}, l, {0, 1, 2, 3});
}

TEST(CopyPlan, RunsBreakWhereEitherSideStopsBeingConsecutive) {
  Layout l = make(config(LayoutKind::kFullyContiguous, 16));
  // src 1,2,3 | 7 | 8 ; dst 10,11,12 | 13 (src jumps) | 0 (dst jumps)
  auto ops = plan(l, {1, 2, 3, 7, 8}, l, {10, 11, 12, 13, 0});
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0].bytes(), 3 * l.block_bytes());
  EXPECT_EQ(ops[1].bytes(), l.block_bytes());
  EXPECT_EQ(ops[2].bytes(), l.block_bytes());
  check_semantics(l, {1, 2, 3, 7, 8}, l, {10, 11, 12, 13, 0});
}

TEST(CopyPlan, PaddedBlocksBecomeOne2DCopyPerRun) {
  Layout padded = make(config(LayoutKind::kFullyContiguous, 8, 1024));  // stride 1024, 256 data
  Layout tight = make(config(LayoutKind::kFullyContiguous, 8));
  auto ops = plan(padded, {0, 1, 2}, tight, {5, 6, 7});
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_FALSE(ops[0].flat());
  EXPECT_EQ(ops[0].width, padded.block_bytes());
  EXPECT_EQ(ops[0].height, 3u);
  EXPECT_EQ(ops[0].src_pitch, 1024u);
  EXPECT_EQ(ops[0].dst_pitch, tight.block_bytes());
  check_semantics(padded, {0, 1, 2}, tight, {5, 6, 7});
}

TEST(CopyPlan, LayerSeparateCopiesOneRangePerLayerAndRun) {
  Layout ls = make(config(LayoutKind::kLayerSeparate, 8, 1, /*layers=*/3));
  auto ops = plan(ls, {2, 3, 4}, ls, {5, 6, 7});
  ASSERT_EQ(ops.size(), 3u);  // one per layer; each run of blocks contiguous inside a layer
  for (const CopyOp& op : ops) {
    EXPECT_TRUE(op.flat());
    EXPECT_EQ(op.bytes(), 3 * 2 * ls.region_bytes());
  }
  check_semantics(ls, {2, 3, 4}, ls, {5, 6, 7});
  check_semantics(ls, {7, 0, 3}, ls, {1, 2, 6});
}

TEST(CopyPlan, MixedKindsMoveEveryRegionToItsPlace) {
  Layout fc = make(config(LayoutKind::kFullyContiguous, 8, 512, 3));
  Layout ls = make(config(LayoutKind::kLayerSeparate, 12, 64, 3));
  check_semantics(fc, {0, 1, 2, 5}, ls, {9, 10, 11, 0});
  check_semantics(ls, {3, 4, 8}, fc, {6, 7, 0});
}

TEST(CopyPlan, PitchesAboveTheLimitFallBackToOneCopyPerBlock) {
  Layout padded = make(config(LayoutKind::kFullyContiguous, 8, 1024));
  Layout tight = make(config(LayoutKind::kFullyContiguous, 8));
  auto ops = plan(padded, {0, 1, 2}, tight, {0, 1, 2}, /*max_pitch=*/512);
  ASSERT_EQ(ops.size(), 3u);
  for (const CopyOp& op : ops) EXPECT_TRUE(op.flat());
  check_semantics(padded, {0, 1, 2}, tight, {0, 1, 2}, 512);
}

TEST(CopyPlan, EmptyListsPlanNothing) {
  Layout l = make(config(LayoutKind::kFullyContiguous, 4));
  EXPECT_TRUE(plan(l, {}, l, {}).empty());
}

TEST(CopyPlan, RejectsMismatchedCounts) {
  Layout l = make(config(LayoutKind::kFullyContiguous, 4));
  std::vector<uint32_t> a{0, 1}, b{2};
  auto p = plan_block_copies(l, a, l, b);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("2 source and 1 destination"), std::string::npos)
      << p.status().message();
}

TEST(CopyPlan, RejectsIdsOutOfRangeNamingThem) {
  Layout l = make(config(LayoutKind::kFullyContiguous, 4));
  std::vector<uint32_t> ok{0, 1}, bad{2, 4};
  auto p = plan_block_copies(l, ok, l, bad);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("destination block id 4 (at index 1)"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("4 blocks"), std::string::npos);
  p = plan_block_copies(l, bad, l, ok);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("source block id 4"), std::string::npos);
}

TEST(CopyPlan, RejectsDifferentBlockShapes) {
  Layout small = make(config(LayoutKind::kFullyContiguous, 4, 1, 2));
  Layout big = make(config(LayoutKind::kFullyContiguous, 4, 1, 4));
  std::vector<uint32_t> ids{0};
  auto p = plan_block_copies(small, ids, big, ids);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("256 bytes per block"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("512 bytes per block"), std::string::npos);
  // Same block bytes, but a LayerSeparate side needs the same layers and outer_dim.
  Layout two_by_two = make(config(LayoutKind::kLayerSeparate, 4, 1, 2, 2));
  Layout four_by_one = make(config(LayoutKind::kFullyContiguous, 4, 1, 4, 1));
  ASSERT_EQ(two_by_two.block_bytes(), four_by_one.block_bytes());
  EXPECT_FALSE(plan_block_copies(two_by_two, ids, four_by_one, ids).is_ok());
  // Both FullyContiguous: bytes are bytes.
  Layout fc_two_by_two = make(config(LayoutKind::kFullyContiguous, 4, 1, 2, 2));
  EXPECT_TRUE(plan_block_copies(fc_two_by_two, ids, four_by_one, ids).is_ok());
}

TEST(CopyPlan, RejectsABlockThatIsSourceAndDestinationOfOnePool) {
  Layout l = make(config(LayoutKind::kFullyContiguous, 8));
  std::vector<uint32_t> src{0, 1, 2}, dst{2, 3, 4};
  auto p = plan_block_copies(l, src, l, dst, /*same_pool=*/true);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("block 2"), std::string::npos) << p.status().message();
  std::vector<uint32_t> apart{5, 6, 7};
  EXPECT_TRUE(plan_block_copies(l, src, l, apart, true).is_ok());
  EXPECT_TRUE(plan_block_copies(l, src, l, dst, /*same_pool=*/false).is_ok());
}

}  // namespace
}  // namespace kvpool
