// A pool's disk tier as tools see it (issue 28 item 9): one DiskTierInfo in the pool's
// registry segment (registry_segment.hpp, layout 4.1), so only the pool's own clients,
// root and kvpoold's uid read it, like the pool's arena.
//
// One writer: kvpoold's engine thread, through the pool's DiskTier (daemon/disk/). The fixed
// fields are written with plain stores before the control segment's kReady (release) and
// read plainly after its acquire; the live fields are relaxed atomics written by that one
// thread, each a moment old when read (no snapshot across fields). A pool without a disk
// tier leaves the whole section zero (`enabled` 0).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kvpool/shm/segment_layout.hpp"

namespace kvpool::shm {

// Onboard latency buckets (submit of the first read to the blocks registered): reads of
// whole blocks from a disk, so 50 us to 1 s rather than the engine's 250 ns to 10 ms.
// buckets[i] counts onboards that took at most kOnboardBoundsNs[i] and more than the bound
// before it; bucket kOnboardBounds counts the slower ones.
inline constexpr size_t kOnboardBounds = 13;
inline constexpr uint64_t kOnboardBoundsNs[kOnboardBounds] = {
    50'000,     100'000,    250'000,    500'000,     1'000'000,   2'500'000,    5'000'000,
    10'000'000, 25'000'000, 50'000'000, 100'000'000, 250'000'000, 1'000'000'000};

// The bucket of a duration against `bounds` (the first bound it does not exceed).
template <size_t N>
constexpr size_t latency_bucket(const uint64_t (&bounds)[N], uint64_t ns) {
  size_t i = 0;
  while (i < N && ns > bounds[i]) ++i;
  return i;
}

inline constexpr size_t kDiskPathBytes = 256;

struct DiskTierInfo {
  // ---- fixed, before kReady (plain) ----
  uint32_t enabled;    // 1: this pool has a disk tier
  uint32_t direct_io;  // 1: O_DIRECT; 0: buffered (the file system or alignment refused it)
  uint64_t slots_total;
  uint64_t slot_bytes;   // 4 KiB header + the block, 4 KiB padded
  uint64_t block_bytes;  // of it, the block's data
  char io_engine[16];    // "io_uring" or "threads", NUL-terminated
  uint8_t reserved0[16];
  char path[kDiskPathBytes];  // the slot file, NUL-terminated (cut at 255 bytes)
  // ---- live, engine thread only, relaxed (offset 320) ----
  alignas(64) std::atomic<uint64_t> slots_used;  // published slots (gauge)
  std::atomic<uint64_t> bytes_written;           // block data made durable
  std::atomic<uint64_t> bytes_read;              // block data onboarded and registered
  std::atomic<uint64_t> blocks_written;
  std::atomic<uint64_t> blocks_onboarded;
  std::atomic<uint64_t> write_queue_drops;  // skipped: the write queue was full
  std::atomic<uint64_t> write_skipped;      // gone from host memory or no slot free in time
  std::atomic<uint64_t> evictions;          // published slots reused for newer blocks
  std::atomic<uint64_t> checksum_failures;  // reads whose data did not match: misses
  std::atomic<uint64_t> io_errors;          // reads or writes the OS failed or cut short
  std::atomic<uint64_t> onboards;           // onboard requests that read at least one block
  std::atomic<uint64_t> onboard_ns_max;
  std::atomic<uint64_t> reserved1[4];
  // Onboard latency (kOnboardBoundsNs, not kLatencyBoundsNs); count and sum_ns as in
  // LatencyHistogram. Offset 448.
  alignas(64) LatencyHistogram onboard_latency;
};
static_assert(std::is_standard_layout_v<DiskTierInfo>);
static_assert(offsetof(DiskTierInfo, slots_total) == 8 && offsetof(DiskTierInfo, io_engine) == 32);
static_assert(offsetof(DiskTierInfo, path) == 64);
static_assert(offsetof(DiskTierInfo, slots_used) == 320);
static_assert(offsetof(DiskTierInfo, onboard_latency) == 448);
static_assert(sizeof(DiskTierInfo) == 640);
static_assert(kOnboardBounds < sizeof(LatencyHistogram::buckets) / sizeof(uint64_t));

}  // namespace kvpool::shm
