// The control segment, owned here: the one function that places its parts, the writer's
// view (kvpoold creates and fills it) and the reader's view (everyone else: libkvpool,
// kvpoolctl, kvpool-events, tests), which validates the segment once and completely.
//
//   ControlHeader | SlotInfo[max_clients] | PoolInfo[num_pools] | arena of each pool
//   (PoolCore state, 4 KiB aligned) | event ring (when configured; 4 KiB aligned)
//
// Ordering: the writer fills everything, then stores ControlHeader::state = kReady with
// release (publish_ready); a reader loads state with acquire before it trusts the rest, so
// every field written before it (sizes, offsets, names) is read plainly after. Fields that
// change while the daemon runs are atomics, loaded with the memory order named at each use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvpool/core/status.hpp"
#include "kvpool/pool/arena.hpp"
#include "kvpool/pool/arena_view.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/event_ring.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::shm {

// Where every part of a control segment lies.
struct ControlLayout {
  uint64_t slots_offset = 0;
  uint64_t pools_offset = 0;
  std::vector<uint64_t> arena_offset;  // per pool
  std::vector<uint64_t> arena_bytes;
  uint64_t event_ring_offset = 0;  // 0 and 0: no event ring
  uint64_t event_ring_bytes = 0;
  uint64_t total_bytes = 0;
};

// The one computation of those offsets, for `max_clients` slots, one arena per entry of
// `pools`, and an event ring of `event_ring_slots` records (0: none). kConfigError naming
// the pool ("pools[i]: ...") when a pool's arena cannot be sized.
Result<ControlLayout> control_layout(uint32_t max_clients,
                                     std::span<const pool::PoolCoreConfig> pools,
                                     uint32_t event_ring_slots);

// kvpoold's side. Creates the segment for a layout and fills the header; the daemon then
// fills each PoolInfo, creates the pool cores in their arenas, and publishes ready.
class ControlWriter {
 public:
  ControlWriter() = default;
  // An unnamed, size-sealed memfd, mode 0600: nobody opens it by name (no /dev/shm entry
  // to squat or read); clients get a read-only descriptor over the socket. Creates the
  // event ring when the layout has one (kConfigError "event_ring_slots: ...").
  static Result<ControlWriter> create(const std::string& instance, uint32_t max_clients,
                                      ControlLayout layout, uint32_t event_ring_slots);

  ControlHeader& header() const { return *segment_.as<ControlHeader>(); }
  SlotInfo* slots() const;
  PoolInfo& pool_info(uint32_t i) const;
  // Initialises pool i's arena and records its place in pool_info(i).
  Result<pool::PoolCore> create_pool_core(uint32_t i, const pool::PoolCoreConfig& config,
                                          const std::string& name);
  // The event ring's producer (not valid() when the layout has none).
  const EventRingWriter& event_ring() const { return event_ring_; }

  // Everything is valid: stored last, with release, so readers that see kReady see it all.
  void publish_ready();
  // Clean shutdown under way (release: clients that see it take the daemon as gone).
  void publish_stopping();
  // A read-only descriptor of the segment, for a client or an observer.
  Result<UniqueFd> open_readonly_fd() const { return segment_.open_readonly_fd(); }

 private:
  Segment segment_;
  ControlLayout layout_;
  EventRingWriter event_ring_;
};

// Everyone else's side: a read-only mapping, validated once (magic, version, ready state,
// sizes, every offset and length within the segment, each arena's header); after that only
// const access, with atomic loads where the daemon writes while we read.
class ControlReader {
 public:
  ControlReader() = default;
  // Takes the mapping of a segment received from kvpoold. kProtocolError when it is not a
  // kvpool control segment or a part lies outside it, kVersionMismatch for another layout
  // major, kDaemonGone when the daemon is not (or no longer) ready.
  static Result<ControlReader> open(Segment segment);

  bool valid() const { return header_ != nullptr; }
  const ControlHeader& header() const { return *header_; }
  uint32_t max_clients() const { return header_->max_clients; }
  uint32_t num_pools() const { return header_->num_pools; }
  // DaemonState, loaded with acquire.
  DaemonState state() const;
  const SlotInfo& slot(uint32_t i) const { return slots_[i]; }
  std::span<const SlotInfo> slots() const { return {slots_, header_->max_clients}; }
  const PoolInfo& pool_info(uint32_t i) const { return infos_[i]; }
  std::span<const PoolInfo> pool_infos() const { return {infos_, header_->num_pools}; }
  // Pool i's arena: counters, holdings, and the one seqlock snapshot (ArenaView::copy_to).
  const pool::ArenaView& arena(uint32_t i) const { return arenas_[i]; }
  const std::vector<pool::ArenaView>& arenas() const { return arenas_; }
  bool has_event_ring() const { return header_->event_ring_offset != 0; }
  // A reader of the event ring, from its oldest record; kUnsupported when there is none.
  Result<EventRingReader> event_ring() const;
  // The request latency histogram, when the daemon writes one (layout minor >= 2).
  const LatencyHistogram* request_latency() const;
  // The daemon's epoch and what it adopted (layout 3.1); nullptr from a 3.0 daemon.
  const RestartInfo* restart() const;
  // The daemon's epoch; 0 from a daemon that does not publish one.
  uint64_t epoch() const { return restart() ? restart()->epoch : 0; }

 private:
  Segment segment_;
  const ControlHeader* header_ = nullptr;
  const SlotInfo* slots_ = nullptr;
  const PoolInfo* infos_ = nullptr;
  std::vector<pool::ArenaView> arenas_;
};

}  // namespace kvpool::shm
