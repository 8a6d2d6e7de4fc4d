#include "kvpool/core/checksum.hpp"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack: no allocation per block
#include <xxhash.h>

namespace kvpool {

uint64_t block_checksum(const std::byte* base, const Layout& layout, uint32_t block) {
  const LayoutConfig& c = layout.config();
  const uint64_t region = layout.region_bytes();
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  // Regions that follow each other in memory are fed as one run (a FullyContiguous block
  // is a single run, a LayerSeparate one a run per layer): the streaming hash of the
  // concatenation is the same whatever the runs, and fewer updates are faster.
  const std::byte* run = nullptr;
  uint64_t run_len = 0;
  for (uint32_t l = 0; l < c.num_layers; ++l) {
    for (uint32_t o = 0; o < c.outer_dim; ++o) {
      const std::byte* p = base + layout.offset_unchecked(block, l, o);
      if (run != nullptr && run + run_len == p) {
        run_len += region;
        continue;
      }
      if (run != nullptr) XXH3_64bits_update(&state, run, run_len);
      run = p;
      run_len = region;
    }
  }
  if (run != nullptr) XXH3_64bits_update(&state, run, run_len);
  const uint64_t h = XXH3_64bits_digest(&state);
  return h == kNoChecksum ? 1 : h;
}

}  // namespace kvpool
