#include "daemon/epoch.hpp"

#include <sys/random.h>
#include <unistd.h>

#include "kvpool/core/clock.hpp"

namespace kvpool::daemon {
namespace {

// splitmix64's finaliser: spreads every input bit over the output.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t new_epoch() {
  uint64_t e = 0;
  if (::getrandom(&e, sizeof(e), 0) != static_cast<ssize_t>(sizeof(e)))
    e = mix(now_ns(CLOCK_REALTIME) ^ mix(now_ns(CLOCK_BOOTTIME)) ^
            mix(static_cast<uint64_t>(::getpid())));
  return e != 0 ? e : 1;
}

uint8_t pick_generation_tag(uint64_t epoch, const std::bitset<256>& taken) {
  // Start where the epoch points and take the first free tag after it: random among
  // unrelated daemons (which share a tag 1 time in 255), never one in use here.
  const uint32_t start = static_cast<uint32_t>(mix(epoch) % 255);
  for (uint32_t k = 0; k < 255; ++k) {
    const uint32_t tag = 1 + (start + k) % 255;
    if (!taken.test(tag)) return static_cast<uint8_t>(tag);
  }
  return static_cast<uint8_t>(1 + start);  // every tag in use: at most a stale-handle confusion
}

}  // namespace kvpool::daemon
