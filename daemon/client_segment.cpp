#include "daemon/client_segment.hpp"

#include <new>

#include "kvpool/shm/lease_mutex.hpp"

namespace kvpool::daemon {

Result<ClientSegment> create_client_segment(uint32_t slot, uint32_t generation,
                                            uint64_t ring_bytes) {
  auto lay = shm::client_segment_layout(ring_bytes);
  auto seg = shm::Segment::create_anonymous("kvpool-client", lay.total_bytes);
  if (!seg)
    return Status(seg.status().code(),
                  "cannot create the client segment: " + seg.status().message());
  auto* ch = new (seg->data()) shm::ClientHeader{};
  ch->magic = shm::kClientMagic;
  ch->layout_major = shm::kLayoutMajor;
  ch->layout_minor = shm::kLayoutMinor;
  ch->slot = slot;
  ch->generation = generation;
  ch->ring_capacity = ring_bytes;
  ch->request_offset = lay.request_offset;
  ch->response_offset = lay.response_offset;
  Status st = shm::init(ch->lease);
  auto* base = seg->as<char>();
  auto req = shm::init_ring(base + lay.request_offset, shm::ring_bytes(ring_bytes), ring_bytes);
  auto resp = shm::init_ring(base + lay.response_offset, shm::ring_bytes(ring_bytes), ring_bytes);
  if (!st.is_ok() || !req || !resp)
    return Status(ErrorCode::kInternal, "cannot set up the client segment");
  return ClientSegment{std::move(seg.value()), ch, *req, *resp};
}

}  // namespace kvpool::daemon
