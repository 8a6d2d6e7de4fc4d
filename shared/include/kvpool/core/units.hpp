// Byte counts as people read them in logs and error messages.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace kvpool {

// "12.5 GiB" (decimals: digits after the point; a free-space message wants two).
inline std::string gib_text(uint64_t bytes, int decimals = 1) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f GiB", decimals, static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

}  // namespace kvpool
