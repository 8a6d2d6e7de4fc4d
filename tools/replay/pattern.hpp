// What a trace block id stands for, derived from the id alone so that every process agrees:
// its tokens (same id => same tokens, so kvpool's chained sequence hashes follow the trace's
// chains) and the bytes of its KV (so any reader can check a block another process wrote).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvpool/core/hash.hpp"

namespace kvpool::replay {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The page_size tokens of block `id`, appended to `out`.
inline void append_block_tokens(uint64_t id, uint32_t page_size, std::vector<Token>& out) {
  for (uint32_t i = 0; i < page_size; ++i)
    out.push_back(static_cast<Token>(splitmix64((id << 20) ^ i) & 0x7fffffff));
}

// The 8-byte word `w` of region `region` ((layer, outer) index) of block `id`.
inline uint64_t block_word(uint64_t id, uint32_t region, uint64_t w) {
  return splitmix64(id * 0x100000001B3ull ^ (uint64_t{region} << 40) ^ w);
}

inline void fill_region(std::byte* p, size_t bytes, uint64_t id, uint32_t region) {
  size_t words = bytes / 8;
  for (size_t w = 0; w < words; ++w) {
    uint64_t v = block_word(id, region, w);
    std::memcpy(p + w * 8, &v, 8);
  }
  if (bytes % 8) {
    uint64_t v = block_word(id, region, words);
    std::memcpy(p + words * 8, &v, bytes % 8);
  }
}

// True when the region holds exactly what fill_region(id, region) wrote.
inline bool check_region(const std::byte* p, size_t bytes, uint64_t id, uint32_t region) {
  size_t words = bytes / 8;
  for (size_t w = 0; w < words; ++w) {
    uint64_t v = block_word(id, region, w);
    if (std::memcmp(p + w * 8, &v, 8) != 0) return false;
  }
  if (bytes % 8) {
    uint64_t v = block_word(id, region, words);
    if (std::memcmp(p + words * 8, &v, bytes % 8) != 0) return false;
  }
  return true;
}

}  // namespace kvpool::replay
