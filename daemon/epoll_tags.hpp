// What an event in the engine's epoll set is about: a kind in the high 32 bits of
// epoll_event::data.u64 and, in the low 32, a client slot (kSock, kPid, kBell) or the
// connection's fd (kPending), or a pool index (kDisk: its disk tier's completions). The engine and
// the sessions module both add to the set.
#pragma once

#include <cstdint>

namespace kvpool::daemon {

enum EventKind : uint64_t {
  kListen = 1,
  kStop = 2,
  kPending = 3,
  kSock = 4,
  kPid = 5,
  kBell = 6,
  kDisk = 7
};  // kDisk: a pool index

constexpr uint64_t event_tag(EventKind k, uint32_t i) {
  return (static_cast<uint64_t>(k) << 32) | i;
}
constexpr EventKind event_kind(uint64_t tag) { return static_cast<EventKind>(tag >> 32); }
constexpr uint32_t event_index(uint64_t tag) { return static_cast<uint32_t>(tag & 0xFFFFFFFFu); }

}  // namespace kvpool::daemon
