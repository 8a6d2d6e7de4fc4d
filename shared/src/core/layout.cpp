#include "kvpool/core/layout.hpp"

#include <bit>
#include <initializer_list>
#include <optional>
#include <string>

namespace kvpool {
namespace {

Status invalid(std::string msg) { return Status(ErrorCode::kInvalidArgument, std::move(msg)); }

Status require_positive(std::string_view field, uint32_t value) {
  if (value > 0) return Status::ok();
  return invalid("layout " + std::string(field) + " must be > 0 (got 0)");
}

// Product of `factors`, or none when it does not fit in 64 bits.
std::optional<uint64_t> checked_mul(std::initializer_list<uint64_t> factors) {
  uint64_t acc = 1;
  for (uint64_t f : factors) {
    if (__builtin_mul_overflow(acc, f, &acc)) return std::nullopt;
  }
  return acc;
}

// `value` rounded up to a multiple of `alignment` (a power of two), or none on overflow.
std::optional<uint64_t> checked_round_up(uint64_t value, uint64_t alignment) {
  uint64_t bumped;
  if (__builtin_add_overflow(value, alignment - 1, &bumped)) return std::nullopt;
  return bumped & ~(alignment - 1);
}

Status index_error(std::string_view name, uint32_t index, std::string_view bound_name,
                   uint32_t bound) {
  return invalid(std::string(name) + " index " + std::to_string(index) +
                 " out of range: " + std::string(bound_name) + " is " + std::to_string(bound) +
                 " (valid 0.." + std::to_string(bound - 1) + ")");
}

}  // namespace

std::string_view layout_kind_name(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::kFullyContiguous:
      return "FullyContiguous";
    case LayoutKind::kLayerSeparate:
      return "LayerSeparate";
  }
  return "Unknown";
}

Result<Layout> Layout::create(const LayoutConfig& c) {
  KVPOOL_RETURN_IF_ERROR(require_positive("num_blocks", c.num_blocks));
  KVPOOL_RETURN_IF_ERROR(require_positive("num_layers", c.num_layers));
  KVPOOL_RETURN_IF_ERROR(require_positive("outer_dim", c.outer_dim));
  KVPOOL_RETURN_IF_ERROR(require_positive("page_size", c.page_size));
  KVPOOL_RETURN_IF_ERROR(require_positive("inner_dim", c.inner_dim));
  KVPOOL_RETURN_IF_ERROR(require_positive("dtype_bytes", c.dtype_bytes));
  KVPOOL_RETURN_IF_ERROR(require_positive("alignment", c.alignment));
  if (c.outer_dim > 2) {
    return invalid("layout outer_dim must be 1 (fused KV) or 2 (separate K and V) (got " +
                   std::to_string(c.outer_dim) + ")");
  }
  if (c.dtype_bytes != 1 && c.dtype_bytes != 2 && c.dtype_bytes != 4 && c.dtype_bytes != 8) {
    return invalid("layout dtype_bytes must be 1, 2, 4 or 8 (got " + std::to_string(c.dtype_bytes) +
                   ")");
  }
  if (!std::has_single_bit(c.alignment)) {
    return invalid("layout alignment must be a power of two (got " + std::to_string(c.alignment) +
                   ")");
  }
  // The kind may come from shared memory or a config file, so any u32 can arrive here.
  if (c.kind != LayoutKind::kFullyContiguous && c.kind != LayoutKind::kLayerSeparate) {
    return invalid("layout kind must be 0 (FullyContiguous) or 1 (LayerSeparate) (got " +
                   std::to_string(static_cast<uint32_t>(c.kind)) + ")");
  }

  const auto overflow = [&c] {
    return invalid("layout total size overflows 64 bits (num_blocks " +
                   std::to_string(c.num_blocks) + ", num_layers " + std::to_string(c.num_layers) +
                   ", outer_dim " + std::to_string(c.outer_dim) + ", page_size " +
                   std::to_string(c.page_size) + ", inner_dim " + std::to_string(c.inner_dim) +
                   ", dtype_bytes " + std::to_string(c.dtype_bytes) + "): reduce a dimension");
  };

  Layout layout;
  layout.config_ = c;
  const std::optional<uint64_t> region = checked_mul({c.page_size, c.inner_dim, c.dtype_bytes});
  if (!region) return overflow();
  const std::optional<uint64_t> block = checked_mul({c.num_layers, c.outer_dim, *region});
  if (!block) return overflow();
  layout.region_bytes_ = *region;
  layout.block_bytes_ = *block;

  std::optional<uint64_t> stride;
  std::optional<uint64_t> total;
  if (c.kind == LayoutKind::kFullyContiguous) {
    stride = checked_round_up(*block, c.alignment);
    if (stride) total = checked_mul({c.num_blocks, *stride});
  } else {
    const std::optional<uint64_t> layer = checked_mul({c.num_blocks, c.outer_dim, *region});
    if (layer) stride = checked_round_up(*layer, c.alignment);
    if (stride) total = checked_mul({c.num_layers, *stride});
  }
  if (!total) return overflow();
  layout.stride_ = *stride;
  layout.total_bytes_ = *total;
  return layout;
}

Result<uint64_t> Layout::offset(uint32_t block, uint32_t layer, uint32_t outer) const {
  if (block >= config_.num_blocks) {
    return index_error("block", block, "num_blocks", config_.num_blocks);
  }
  if (layer >= config_.num_layers) {
    return index_error("layer", layer, "num_layers", config_.num_layers);
  }
  if (outer >= config_.outer_dim) {
    return index_error("outer", outer, "outer_dim", config_.outer_dim);
  }
  return offset_unchecked(block, layer, outer);
}

}  // namespace kvpool
