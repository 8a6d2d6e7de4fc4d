#include "kvpool/core/layout.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

namespace kvpool {
namespace {

// 3 blocks, 2 layers, K and V apart, 4 tokens of 3 fp16 elements: region = 24 bytes,
// block = 2 * 2 * 24 = 96 bytes.
LayoutConfig small(LayoutKind kind, uint32_t alignment) {
  return LayoutConfig{.num_blocks = 3,
                      .num_layers = 2,
                      .outer_dim = 2,
                      .page_size = 4,
                      .inner_dim = 3,
                      .dtype_bytes = 2,
                      .alignment = alignment,
                      .kind = kind};
}

TEST(Layout, ConfigIsAFixedPlainStruct) {
  EXPECT_EQ(sizeof(LayoutConfig), 32u);
  LayoutConfig a = small(LayoutKind::kLayerSeparate, 64);
  LayoutConfig b;
  std::memcpy(&b, &a, sizeof a);  // how it crosses shared memory
  EXPECT_EQ(a, b);
}

TEST(Layout, FullyContiguousUnaligned) {
  Result<Layout> l = Layout::create(small(LayoutKind::kFullyContiguous, 1));
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->region_bytes(), 24u);
  EXPECT_EQ(l->block_bytes(), 96u);
  EXPECT_EQ(l->total_bytes(), 3u * 96u);
  EXPECT_EQ(l->offset(0, 0, 0).value(), 0u);
  EXPECT_EQ(l->offset(0, 0, 1).value(), 24u);
  EXPECT_EQ(l->offset(0, 1, 0).value(), 48u);
  EXPECT_EQ(l->offset(0, 1, 1).value(), 72u);
  EXPECT_EQ(l->offset(1, 0, 0).value(), 96u);
  EXPECT_EQ(l->offset(2, 1, 1).value(), 2u * 96u + 72u);
}

TEST(Layout, FullyContiguousRoundsBlockStrideToAlignment) {
  Result<Layout> l = Layout::create(small(LayoutKind::kFullyContiguous, 256));
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->block_bytes(), 96u);  // data only, padding excluded
  EXPECT_EQ(l->total_bytes(), 3u * 256u);
  EXPECT_EQ(l->offset(1, 0, 0).value(), 256u);
  EXPECT_EQ(l->offset(2, 0, 1).value(), 512u + 24u);
  EXPECT_EQ(l->offset(2, 1, 1).value(), 512u + 72u);
  // An already aligned block size gets no padding.
  Result<Layout> exact = Layout::create(small(LayoutKind::kFullyContiguous, 32));
  ASSERT_TRUE(exact.is_ok());
  EXPECT_EQ(exact->offset(1, 0, 0).value(), 96u);
}

TEST(Layout, LayerSeparateUnaligned) {
  Result<Layout> l = Layout::create(small(LayoutKind::kLayerSeparate, 1));
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  // One layer: 3 blocks * 2 outer * 24 bytes = 144 bytes.
  EXPECT_EQ(l->block_bytes(), 96u);
  EXPECT_EQ(l->total_bytes(), 2u * 144u);
  EXPECT_EQ(l->offset(0, 0, 0).value(), 0u);
  EXPECT_EQ(l->offset(0, 0, 1).value(), 24u);
  EXPECT_EQ(l->offset(1, 0, 0).value(), 48u);
  EXPECT_EQ(l->offset(2, 0, 1).value(), 120u);
  EXPECT_EQ(l->offset(0, 1, 0).value(), 144u);
  EXPECT_EQ(l->offset(2, 1, 1).value(), 144u + 120u);
}

TEST(Layout, LayerSeparateRoundsLayerStartToAlignment) {
  Result<Layout> l = Layout::create(small(LayoutKind::kLayerSeparate, 128));
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->total_bytes(), 2u * 256u);
  EXPECT_EQ(l->offset(2, 0, 1).value(), 120u);
  EXPECT_EQ(l->offset(0, 1, 0).value(), 256u);
  EXPECT_EQ(l->offset(1, 1, 1).value(), 256u + 72u);
}

TEST(Layout, OuterDimOne) {
  LayoutConfig c = small(LayoutKind::kFullyContiguous, 1);
  c.outer_dim = 1;
  Result<Layout> l = Layout::create(c);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->block_bytes(), 48u);
  EXPECT_EQ(l->offset(1, 1, 0).value(), 48u + 24u);
  EXPECT_EQ(l->offset(0, 0, 1).status().code(), ErrorCode::kInvalidArgument);
}

TEST(Layout, OffsetUncheckedAgreesWithOffset) {
  for (LayoutKind kind : {LayoutKind::kFullyContiguous, LayoutKind::kLayerSeparate}) {
    Result<Layout> l = Layout::create(small(kind, 64));
    ASSERT_TRUE(l.is_ok());
    for (uint32_t b = 0; b < 3; ++b) {
      for (uint32_t y = 0; y < 2; ++y) {
        for (uint32_t o = 0; o < 2; ++o) {
          EXPECT_EQ(l->offset(b, y, o).value(), l->offset_unchecked(b, y, o));
          EXPECT_LE(l->offset_unchecked(b, y, o) + l->region_bytes(), l->total_bytes());
        }
      }
    }
  }
}

TEST(Layout, OutOfRangeIndicesNameIndexAndBound) {
  Result<Layout> l = Layout::create(small(LayoutKind::kFullyContiguous, 1));
  ASSERT_TRUE(l.is_ok());
  Status st = l->offset(3, 0, 0).status();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("block index 3"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("num_blocks is 3"), std::string::npos) << st.message();
  st = l->offset(0, 2, 0).status();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layer index 2"), std::string::npos) << st.message();
  st = l->offset(0, 0, 2).status();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("outer index 2"), std::string::npos) << st.message();
  EXPECT_EQ(l->offset(std::numeric_limits<uint32_t>::max(), 0, 0).status().code(),
            ErrorCode::kInvalidArgument);
}

// Creates `c` and expects InvalidArgument with `field` in the message.
void expect_rejected(const LayoutConfig& c, const std::string& field) {
  Result<Layout> l = Layout::create(c);
  ASSERT_FALSE(l.is_ok()) << field;
  EXPECT_EQ(l.status().code(), ErrorCode::kInvalidArgument) << field;
  EXPECT_NE(l.status().message().find(field), std::string::npos) << l.status().message();
}

TEST(Layout, EveryZeroDimensionIsRejected) {
  const LayoutConfig good = small(LayoutKind::kFullyContiguous, 1);
  LayoutConfig c = good;
  c.num_blocks = 0;
  expect_rejected(c, "num_blocks");
  c = good;
  c.num_layers = 0;
  expect_rejected(c, "num_layers");
  c = good;
  c.outer_dim = 0;
  expect_rejected(c, "outer_dim");
  c = good;
  c.page_size = 0;
  expect_rejected(c, "page_size");
  c = good;
  c.inner_dim = 0;
  expect_rejected(c, "inner_dim");
  c = good;
  c.dtype_bytes = 0;
  expect_rejected(c, "dtype_bytes");
  c = good;
  c.alignment = 0;
  expect_rejected(c, "alignment");
}

TEST(Layout, BadValuesAreRejected) {
  const LayoutConfig good = small(LayoutKind::kFullyContiguous, 1);
  LayoutConfig c = good;
  c.outer_dim = 3;
  expect_rejected(c, "outer_dim");
  for (uint32_t d : {3u, 5u, 6u, 16u}) {
    c = good;
    c.dtype_bytes = d;
    expect_rejected(c, "dtype_bytes");
  }
  for (uint32_t a : {3u, 12u, 100u, 0xffffffffu}) {
    c = good;
    c.alignment = a;
    expect_rejected(c, "alignment");
  }
  c = good;
  c.kind = static_cast<LayoutKind>(7);
  expect_rejected(c, "kind");
  for (uint32_t d : {1u, 2u, 4u, 8u}) {
    c = good;
    c.dtype_bytes = d;
    EXPECT_TRUE(Layout::create(c).is_ok()) << d;
  }
  c = good;
  c.alignment = 1u << 31;
  EXPECT_TRUE(Layout::create(c).is_ok());
}

TEST(Layout, OverflowIsRejected) {
  const uint32_t max = std::numeric_limits<uint32_t>::max();
  for (LayoutKind kind : {LayoutKind::kFullyContiguous, LayoutKind::kLayerSeparate}) {
    // Region alone overflows: 2^32 * 2^32 * 8.
    LayoutConfig c = small(kind, 1);
    c.page_size = max;
    c.inner_dim = max;
    c.dtype_bytes = 8;
    expect_rejected(c, "overflows");
    // Each factor fits, the product over blocks and layers does not.
    c = small(kind, 1);
    c.num_blocks = max;
    c.num_layers = max;
    c.page_size = 1u << 16;
    expect_rejected(c, "overflows");
  }
}

// 2^32 + 1 = 641 * 6700417, and (2^32 - 1) * (2^32 + 1) = 2^64 - 1: the largest total that
// fits. Padding the stride to 2^31 pushes that same shape over.
TEST(Layout, AlignmentPaddingCanOverflow) {
  const uint32_t max = std::numeric_limits<uint32_t>::max();
  LayoutConfig fc{.num_blocks = max,
                  .num_layers = 641,
                  .outer_dim = 1,
                  .page_size = 6700417,
                  .inner_dim = 1,
                  .dtype_bytes = 1,
                  .alignment = 1,
                  .kind = LayoutKind::kFullyContiguous};
  Result<Layout> l = Layout::create(fc);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->total_bytes(), std::numeric_limits<uint64_t>::max());
  fc.alignment = 1u << 31;
  expect_rejected(fc, "overflows");

  LayoutConfig ls = fc;
  ls.kind = LayoutKind::kLayerSeparate;
  ls.num_blocks = 641;
  ls.num_layers = max;
  ls.alignment = 1;
  l = Layout::create(ls);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->total_bytes(), std::numeric_limits<uint64_t>::max());
  ls.alignment = 1u << 31;
  expect_rejected(ls, "overflows");
}

TEST(Layout, KindNames) {
  EXPECT_EQ(layout_kind_name(LayoutKind::kFullyContiguous), "FullyContiguous");
  EXPECT_EQ(layout_kind_name(LayoutKind::kLayerSeparate), "LayerSeparate");
}

}  // namespace
}  // namespace kvpool
