// Which byte ranges move when whole blocks are copied from one pool to another: the plan
// behind kvpool::copy_blocks, kept free of CUDA so it is tested on any machine.
//
// A plan is a list of 2D copies (the shape of cudaMemcpy2DAsync): `height` rows of `width`
// bytes, rows `src_pitch` / `dst_pitch` bytes apart. Ids are walked in runs where both the
// source and the destination id go up by one:
//   - both layouts FullyContiguous: one copy per run (row = one block's data, pitch = each
//     pool's block stride); with no padding between blocks it is one flat copy.
//   - otherwise (either is LayerSeparate): one copy per run and layer (row = that layer's
//     outer_dim regions of one block, contiguous in both kinds).
// Rows are never merged across a pitch above `max_pitch` (a CUDA limit); such runs become
// one copy per block.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvpool/core/layout.hpp"
#include "kvpool/core/status.hpp"

namespace kvpool {

struct CopyOp {
  uint64_t src_offset;  // from the source pool's base
  uint64_t dst_offset;  // from the destination pool's base
  uint64_t width;       // bytes per row
  uint64_t height;      // rows (blocks of the run)
  uint64_t src_pitch;   // bytes between rows in the source (== width when flat)
  uint64_t dst_pitch;

  bool flat() const { return height == 1 || (src_pitch == width && dst_pitch == width); }
  uint64_t bytes() const { return width * height; }
  friend bool operator==(const CopyOp&, const CopyOp&) = default;
};

// The largest pitch cudaMemcpy2DAsync takes on current GPUs (cudaDevAttrMaxPitch).
inline constexpr uint64_t kMaxCopyPitch = (uint64_t{1} << 31) - 1;

// Plans copying block src_ids[i] of `src` to block dst_ids[i] of `dst`, for every i.
// kInvalidArgument when the id lists differ in length, an id is out of range, the layouts
// hold blocks of different sizes (or, with a LayerSeparate side, a different number of
// layers or outer_dim), or `same_pool` and a block would be copied onto a block that is also
// a source (overlapping copies are undefined).
Result<std::vector<CopyOp>> plan_block_copies(const Layout& src, std::span<const uint32_t> src_ids,
                                              const Layout& dst, std::span<const uint32_t> dst_ids,
                                              bool same_pool = false,
                                              uint64_t max_pitch = kMaxCopyPitch);

// Executes a plan with memcpy (host pools, no CUDA needed).
void copy_on_host(std::span<const CopyOp> ops, const std::byte* src_base, std::byte* dst_base);

}  // namespace kvpool
