// Plain fields of a shared segment, written or checked the one way: fixed-size names, and
// [offset, offset + bytes) ranges that a reader takes from a segment it does not trust.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace kvpool::shm {

// Writes `src` into a fixed name field, cut to fit and always NUL-terminated, the rest zero
// (a reader may print the field as it is).
template <size_t N>
void copy_name(char (&dst)[N], std::string_view src) {
  static_assert(N > 0);
  std::memset(dst, 0, N);
  std::memcpy(dst, src.data(), std::min(src.size(), N - 1));
}

// [offset, offset + bytes) lies within [0, size), computed without overflow (both numbers
// may come from a peer).
constexpr bool within(uint64_t offset, uint64_t bytes, uint64_t size) {
  return offset <= size && bytes <= size - offset;
}

}  // namespace kvpool::shm
