// Per-block checksums: an optional XXH3-64 of a block's KV bytes, computed by the client
// that registers the block and checked by kvpoold (on a reader's request, and by
// `kvpoolctl scrub`), so that a block whose bytes were changed after registration is
// caught and evicted instead of being served again. Host pools only: the daemon must be
// able to read the bytes.
//
// Only the bytes of the block's regions are hashed, in (layer, outer) order, never the
// alignment padding between them: the value depends on the KV data alone, so it is the
// same for a FullyContiguous and a LayerSeparate pool of the same block shape.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvpool/core/layout.hpp"

namespace kvpool {

// The value that means "this block has no checksum" (RegisterItem::checksum, the arena).
inline constexpr uint64_t kNoChecksum = 0;

// The checksum of block `block` of a pool whose block bytes start at `base` in this
// process. A hash that comes out as kNoChecksum is returned as 1 (1 in 2^64: it only
// keeps "none" unambiguous). `block` must be < layout.config().num_blocks.
uint64_t block_checksum(const std::byte* base, const Layout& layout, uint32_t block);

}  // namespace kvpool
