// How much kvpoold hashes for one checksum request (kVerify, kScrub) on its engine thread,
// which serves every client (issue 27, item 3).
#pragma once

#include <cstdint>

namespace kvpool::proto {

// Most block bytes one kVerify or kScrub hashes (at least one block): ~16 us at the 4 GiB/s
// kvpool_checksum_bench measured on a busy 2-core machine. The engine also runs at most one
// such request per pass over its clients (daemon/engine.cpp), so a flood of checks, from
// one client or sixteen, delays anyone else's match by one slice, and a long verify or scrub
// is many slices, paid by the client that asked. (kChecksumBudgetBytes, protocol.hpp, is
// the 4 MiB a request could ask for before; the daemon now clamps to this.)
inline constexpr uint64_t kCheckSliceBytes = 64ull << 10;

}  // namespace kvpool::proto
