#include "kvpool/core/copy_plan.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace kvpool {
namespace {

Status invalid(std::string msg) { return Status(ErrorCode::kInvalidArgument, std::move(msg)); }

Status check_ids(const Layout& layout, std::span<const uint32_t> ids, const char* side) {
  const uint32_t n = layout.config().num_blocks;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= n) {
      return invalid(std::string(side) + " block id " + std::to_string(ids[i]) + " (at index " +
                     std::to_string(i) + ") is out of range: the pool has " + std::to_string(n) +
                     " blocks");
    }
  }
  return Status::ok();
}

std::string shape(const Layout& l) {
  const LayoutConfig& c = l.config();
  return std::string(layout_kind_name(c.kind)) + " " + std::to_string(c.num_layers) + " layers x " +
         std::to_string(c.outer_dim) + " outer x " + std::to_string(l.region_bytes()) +
         " bytes = " + std::to_string(l.block_bytes()) + " bytes per block";
}

// Bytes between the same region of block b and block b + 1.
uint64_t block_pitch(const Layout& l) {
  if (l.config().num_blocks < 2) return l.block_bytes();  // never used for more than 1 row
  return l.offset_unchecked(1, 0, 0) - l.offset_unchecked(0, 0, 0);
}

// Appends `height` rows starting at (s0, d0), split into single rows when a pitch is too
// large for one 2D copy; flat runs become one 1D copy.
void emit(std::vector<CopyOp>& out, uint64_t src_off, uint64_t dst_off, uint64_t width,
          uint64_t height, uint64_t src_pitch, uint64_t dst_pitch, uint64_t max_pitch) {
  if (height > 1 && src_pitch == width && dst_pitch == width) {
    out.push_back({src_off, dst_off, width * height, 1, width * height, width * height});
    return;
  }
  if (height > 1 && (src_pitch > max_pitch || dst_pitch > max_pitch)) {
    for (uint64_t r = 0; r < height; ++r)
      out.push_back({src_off + r * src_pitch, dst_off + r * dst_pitch, width, 1, width, width});
    return;
  }
  if (height == 1) {
    src_pitch = width;
    dst_pitch = width;
  }
  out.push_back({src_off, dst_off, width, height, src_pitch, dst_pitch});
}

}  // namespace

Result<std::vector<CopyOp>> plan_block_copies(const Layout& src, std::span<const uint32_t> src_ids,
                                              const Layout& dst, std::span<const uint32_t> dst_ids,
                                              bool same_pool, uint64_t max_pitch) {
  if (src_ids.size() != dst_ids.size()) {
    return invalid("copy_blocks needs one destination id per source id (got " +
                   std::to_string(src_ids.size()) + " source and " +
                   std::to_string(dst_ids.size()) + " destination ids)");
  }
  KVPOOL_RETURN_IF_ERROR(check_ids(src, src_ids, "source"));
  KVPOOL_RETURN_IF_ERROR(check_ids(dst, dst_ids, "destination"));
  const LayoutConfig& sc = src.config();
  const LayoutConfig& dc = dst.config();
  const bool both_contiguous =
      sc.kind == LayoutKind::kFullyContiguous && dc.kind == LayoutKind::kFullyContiguous;
  if (src.block_bytes() != dst.block_bytes() ||
      (!both_contiguous && (sc.num_layers != dc.num_layers || sc.outer_dim != dc.outer_dim))) {
    return invalid("cannot copy blocks between different layouts: source is " + shape(src) +
                   ", destination is " + shape(dst));
  }
  if (same_pool) {
    std::vector<uint32_t> sorted(src_ids.begin(), src_ids.end());
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t id : dst_ids) {
      if (std::binary_search(sorted.begin(), sorted.end(), id)) {
        return invalid("block " + std::to_string(id) +
                       " is both a source and a destination of this copy (same pool); "
                       "overlapping copies are not allowed");
      }
    }
  }

  std::vector<CopyOp> ops;
  const uint64_t src_pitch = block_pitch(src);
  const uint64_t dst_pitch = block_pitch(dst);
  for (size_t i = 0; i < src_ids.size();) {
    size_t n = 1;
    while (i + n < src_ids.size() && src_ids[i + n] == src_ids[i] + n &&
           dst_ids[i + n] == dst_ids[i] + n)
      ++n;
    const uint32_t s0 = src_ids[i];
    const uint32_t d0 = dst_ids[i];
    if (both_contiguous) {
      emit(ops, src.offset_unchecked(s0, 0, 0), dst.offset_unchecked(d0, 0, 0), src.block_bytes(),
           n, src_pitch, dst_pitch, max_pitch);
    } else {
      // One layer of one block: outer_dim regions, contiguous in both kinds.
      const uint64_t width = uint64_t{sc.outer_dim} * src.region_bytes();
      for (uint32_t l = 0; l < sc.num_layers; ++l) {
        emit(ops, src.offset_unchecked(s0, l, 0), dst.offset_unchecked(d0, l, 0), width, n,
             src_pitch, dst_pitch, max_pitch);
      }
    }
    i += n;
  }
  return ops;
}

void copy_on_host(std::span<const CopyOp> ops, const std::byte* src_base, std::byte* dst_base) {
  for (const CopyOp& op : ops) {
    if (op.flat()) {
      std::memcpy(dst_base + op.dst_offset, src_base + op.src_offset, op.bytes());
      continue;
    }
    for (uint64_t r = 0; r < op.height; ++r) {
      std::memcpy(dst_base + op.dst_offset + r * op.dst_pitch,
                  src_base + op.src_offset + r * op.src_pitch, op.width);
    }
  }
}

}  // namespace kvpool
