// Byte patterns the GPU tests write and check with kernels (pattern.cu) and on the host.
// Word i of a region written with `seed` is pattern_word(seed, i): every region of every
// block differs, so a copy to the wrong place or a stale block is caught.
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define KVPOOL_HOST_DEVICE __host__ __device__
#else
#define KVPOOL_HOST_DEVICE
#endif

namespace kvpool::gputest {

KVPOOL_HOST_DEVICE inline uint64_t pattern_word(uint64_t seed, uint64_t i) {
  return seed * 0x9E3779B97F4A7C15ull + i * 0xD6E8FEB86659FD93ull + 1;
}

// The seed of region (layer, outer) of a block known by `key` (its sequence hash, say).
inline uint64_t region_seed(uint64_t key, uint32_t layer, uint32_t outer) {
  return key ^ ((uint64_t{layer} * 2 + outer + 1) * 0xA0761D6478BD642Full);
}

// Writes `words` pattern words at device pointer `dst` on `stream` (a cudaStream_t).
// Returns the launch's cudaError_t (0: success).
int launch_fill(void* dst, size_t words, uint64_t seed, void* stream);
// Adds to *mismatches (device memory) the words at `src` that differ from the pattern.
int launch_check(const void* src, size_t words, uint64_t seed, unsigned long long* mismatches,
                 void* stream);

}  // namespace kvpool::gputest
