// Who a kvpoold is: its start epoch, and the generation tag its block handles carry
// (pool/arena.hpp, next_generation). Both are published in ControlHeader::restart.
#pragma once

#include <bitset>
#include <cstdint>

namespace kvpool::daemon {

// A random nonzero 64-bit number, new at every start (getrandom). Random rather than the
// pid or the start time: a successor daemon may get its predecessor's pid (another PID
// namespace, a pid wrap), and two daemons may start in the same clock tick; 64 random bits
// collide practically never. Without getrandom (it cannot fail on Linux >= 3.17 once the
// pool is initialised, but a seccomp filter could refuse it) the clocks and the pid are
// mixed instead, which still differs from any predecessor's.
uint64_t new_epoch();

// A generation tag for a daemon of `epoch`: nonzero, and not one of the tags in `taken`
// (those still carried by generations of an adopted arena), so no handle any earlier
// daemon issued can equal a generation this one issues.
uint8_t pick_generation_tag(uint64_t epoch, const std::bitset<256>& taken);

}  // namespace kvpool::daemon
