// One attached client as the daemon sees it: its socket, pidfd, doorbell eventfd, its own
// segment and the daemon's views of its rings. Owned by Sessions (daemon/sessions.hpp),
// touched only by the progress-engine thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "kvpool/shm/ring.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::daemon {

struct Session {
  shm::SlotState state = shm::SlotState::kFree;
  uint32_t slot = 0;
  uint32_t generation = 0;
  bool ready = false;  // the client holds its lease (sent Ready)
  shm::UniqueFd sock;
  shm::UniqueFd pidfd;
  shm::UniqueFd doorbell;  // eventfd the client writes when the engine sleeps
  shm::Segment segment;
  shm::ClientHeader* header = nullptr;
  std::optional<shm::RingConsumer> requests;
  std::optional<shm::RingProducer> responses;
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  uint64_t attach_ns = 0;      // CLOCK_REALTIME, for kvpoolctl
  uint64_t start_ticks = 0;    // the process's start time (kept_processes.hpp), 0 unknown
  uint64_t hello_mono_ns = 0;  // CLOCK_MONOTONIC of the Welcome: bounds the wait for Ready
  uint32_t pool_mask = 0;      // pools this client may use (proto::Welcome::pool_mask)
  uint32_t protocol_errors = 0;
  uint64_t rejected_handles = 0;  // refused release handles; too many cut the client off
  bool backpressured = false;     // its response ring was full at the last attempt
  // CLOCK_MONOTONIC of the pass that last took a request from it: the engine counts it busy
  // for shm::kBusyWindowNs after (ControlStats::clients_busy).
  uint64_t last_request_ns = 0;
};

}  // namespace kvpool::daemon
