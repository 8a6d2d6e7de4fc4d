// The segment kvpoold makes for each attaching client: its header (slot, generation, lease)
// and its two rings, placed by shm::client_segment_layout. The daemon writes it once, before
// the client has a descriptor for it; from then on the rings are the only shared parts.
#pragma once

#include <cstdint>

#include "kvpool/core/status.hpp"
#include "kvpool/shm/ring.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"

namespace kvpool::daemon {

struct ClientSegment {
  shm::Segment segment;
  shm::ClientHeader* header = nullptr;
  shm::RingHeader* requests = nullptr;
  shm::RingHeader* responses = nullptr;
};

// A fresh segment for `slot` at `generation`, rings of `ring_bytes` each. Errors say what
// failed in words a refused client can pass on.
Result<ClientSegment> create_client_segment(uint32_t slot, uint32_t generation,
                                            uint64_t ring_bytes);

}  // namespace kvpool::daemon
