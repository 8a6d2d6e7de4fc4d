// Clock reads as nanoseconds, for every room: CLOCK_MONOTONIC for intervals and deadlines,
// CLOCK_REALTIME only for times a person reads (a client's attach time, an event's time).
#pragma once

#include <time.h>

#include <cstdint>

namespace kvpool {

inline uint64_t now_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace kvpool
