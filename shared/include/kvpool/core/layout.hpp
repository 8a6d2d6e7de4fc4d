// Where each KV region of a pool lives, Dynamo-style. A region is the data of one
// (block, layer, outer) triple: page_size tokens of inner_dim elements of dtype_bytes each.
// outer_dim is 2 when K and V are stored apart, 1 when they are fused.
//
//   region_bytes = page_size * inner_dim * dtype_bytes
//   block_bytes  = num_layers * outer_dim * region_bytes        (data of one block)
//
// FullyContiguous: [blocks][layers][outer][page*inner], one block's data contiguous.
//   block_stride = round_up(block_bytes, alignment)
//   offset(b, l, o) = b * block_stride + (l * outer_dim + o) * region_bytes
//   total_bytes     = num_blocks * block_stride
//
// LayerSeparate: [layers][blocks][outer][page*inner], one layer's data contiguous.
//   layer_stride = round_up(num_blocks * outer_dim * region_bytes, alignment)
//   offset(b, l, o) = l * layer_stride + (b * outer_dim + o) * region_bytes
//   total_bytes     = num_layers * layer_stride
//
// Offsets are from the pool base, which the storage must itself align to `alignment`.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "kvpool/core/status.hpp"

namespace kvpool {

// Stable numeric values: the kind travels in shared memory.
enum class LayoutKind : uint32_t { kFullyContiguous = 0, kLayerSeparate = 1 };

// "FullyContiguous", "LayerSeparate".
std::string_view layout_kind_name(LayoutKind kind);

// Plain fields only: this struct is written into shared memory by the daemon and read by
// clients, so its size and layout must not depend on the compiler or the build.
struct LayoutConfig {
  uint32_t num_blocks;
  uint32_t num_layers;
  uint32_t outer_dim;    // 1 or 2
  uint32_t page_size;    // tokens per block
  uint32_t inner_dim;    // elements per token per (layer, outer)
  uint32_t dtype_bytes;  // 1, 2, 4 or 8
  uint32_t alignment;    // power of two, >= 1
  LayoutKind kind;

  friend bool operator==(const LayoutConfig&, const LayoutConfig&) = default;
};
static_assert(std::is_standard_layout_v<LayoutConfig>);
static_assert(std::is_trivially_copyable_v<LayoutConfig>);
static_assert(sizeof(LayoutConfig) == 32);
static_assert(alignof(LayoutConfig) == 4);

class Layout {
 public:
  // Validates every field (InvalidArgument naming the field) and that total_bytes fits u64.
  static Result<Layout> create(const LayoutConfig& config);

  const LayoutConfig& config() const { return config_; }
  uint64_t region_bytes() const { return region_bytes_; }
  uint64_t block_bytes() const { return block_bytes_; }
  uint64_t total_bytes() const { return total_bytes_; }

  // Byte offset of region (block, layer, outer) from the pool base; InvalidArgument naming
  // the index and its bound when one is out of range.
  Result<uint64_t> offset(uint32_t block, uint32_t layer, uint32_t outer) const;
  // Same without bounds checks, for hot paths whose indices are already known valid.
  uint64_t offset_unchecked(uint32_t block, uint32_t layer, uint32_t outer) const {
    if (config_.kind == LayoutKind::kFullyContiguous) {
      return block * stride_ + (uint64_t{layer} * config_.outer_dim + outer) * region_bytes_;
    }
    return layer * stride_ + (uint64_t{block} * config_.outer_dim + outer) * region_bytes_;
  }

 private:
  Layout() = default;

  LayoutConfig config_{};
  uint64_t region_bytes_ = 0;
  uint64_t block_bytes_ = 0;
  uint64_t stride_ = 0;  // block stride (FullyContiguous) or layer stride (LayerSeparate)
  uint64_t total_bytes_ = 0;
};

}  // namespace kvpool
