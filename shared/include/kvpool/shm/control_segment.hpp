// The control segment, owned here: the one function that places its parts, the writer's
// view (kvpoold creates and fills it) and the reader's view (everyone else: libkvpool,
// kvpoolctl, kvpool-events, tests), which validates the segment once and completely.
//
//   ControlHeader | PoolInfo[num_pools]
//
// It is what every client and observer of the instance may see: the daemon's state and
// global counters, and each pool's name and layout. Everything of one pool that only that
// pool's clients may read (its registry, its events and token ids, who uses it) lives in the
// pool's registry segment (shm/registry_segment.hpp), whose descriptor the daemon sends only
// to callers the pool's allow-lists admit; the writer here owns those too, the reader holds
// the ones its caller was given.
//
// Ordering: the writer fills everything (registry segments included), then stores
// ControlHeader::state = kReady with release (publish_ready); a reader loads state with
// acquire before it trusts the rest, so every field written before it (sizes, offsets,
// names) is read plainly after. Fields that change while the daemon runs are atomics, loaded
// with the memory order named at each use.
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
#include "kvpool/shm/registry_segment.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::shm {

// Where every part of a control segment and of each pool's registry segment lies.
struct ControlLayout {
  uint64_t pools_offset = 0;
  uint64_t total_bytes = 0;
  std::vector<RegistryLayout> registries;  // per pool
};

// The one computation of those offsets, for `max_clients` slots, one registry per entry of
// `pools`, each with an event ring of `event_ring_slots` records (0: none). kConfigError
// naming the pool ("pools[i]: ...") when a pool's arena cannot be sized.
Result<ControlLayout> control_layout(uint32_t max_clients,
                                     std::span<const pool::PoolCoreConfig> pools,
                                     uint32_t event_ring_slots);

// kvpoold's side. Creates the control segment and every pool's registry segment for a
// layout and fills their headers; the daemon then fills each PoolInfo, creates the pool
// cores in their arenas, and publishes ready.
class ControlWriter {
 public:
  ControlWriter() = default;
  // Unnamed, size-sealed memfds, mode 0600: nobody opens them by name (no /dev/shm entry
  // to squat or read); clients get read-only descriptors over the socket. `pool_names`:
  // one per pool of the layout. kConfigError "event_ring_slots: ..." when a ring cannot be
  // made.
  static Result<ControlWriter> create(const std::string& instance, uint32_t max_clients,
                                      ControlLayout layout, std::span<const std::string> pool_names,
                                      uint32_t event_ring_slots);

  ControlHeader& header() const { return *segment_.as<ControlHeader>(); }
  uint32_t num_pools() const { return static_cast<uint32_t>(registries_.size()); }
  PoolInfo& pool_info(uint32_t i) const;
  RegistryWriter& registry(uint32_t i) { return registries_[i]; }
  const RegistryWriter& registry(uint32_t i) const { return registries_[i]; }
  // Client `slot` as pool i's clients see it (its registry segment's slot table).
  SlotInfo& slot(uint32_t pool, uint32_t slot) const { return registries_[pool].slots()[slot]; }
  // Initialises pool i's arena (in its registry segment).
  Result<pool::PoolCore> create_pool_core(uint32_t i, const pool::PoolCoreConfig& config,
                                          const std::string& name);
  // Pool i's event ring producer (not valid() when the layout has none).
  const EventRingWriter& event_ring(uint32_t i) const { return registries_[i].event_ring(); }
  // Stamps the daemon's epoch into every registry segment (adoption pairs them by it).
  void set_epoch(uint64_t epoch);

  // Everything is valid: stored last, with release, so readers that see kReady see it all.
  void publish_ready();
  // Clean shutdown under way (release: clients that see it take the daemon as gone).
  void publish_stopping();
  // A read-only descriptor of the control segment, for any client or observer.
  Result<UniqueFd> open_readonly_fd() const { return segment_.open_readonly_fd(); }
  // A read-only descriptor of pool i's registry segment: only for callers allowed pool i.
  Result<UniqueFd> open_registry_fd(uint32_t i) const { return registries_[i].open_readonly_fd(); }

 private:
  Segment segment_;
  ControlLayout layout_;
  std::vector<RegistryWriter> registries_;
};

struct GradedControl;

// How a control segment stands, graded once by ControlReader::open_graded (as Aeron's CnC
// loader grades its file before anyone reads it). Who opens it decides what it may be:
// a client or observer received it from a daemon that runs, a successor found it in the
// supervisor's store after its daemon died.
enum class ControlOpener : uint8_t {
  kClient,     // graded by the state its daemon published; its daemon's pid is not checked
               // (a client may run in another pid namespace)
  kSuccessor,  // the daemon that wrote it must be gone, its layout exactly this build's
};
enum class ControlGrade : uint8_t {
  kRefused,   // not usable: `why` says why (not kvpool's, another layout, a part outside
              // it, a daemon that still runs)
  kStarting,  // (client) its daemon still fills it: nothing but the header is written yet
  kStopping,  // (client) its daemon shuts down cleanly: clients take it as gone
  kReady,     // (client) its daemon published it and serves: `reader` reads it
  kDead,      // (successor) its daemon is gone: `reader` reads what it left, to adopt it
};
const char* to_string(ControlGrade g);

// Everyone else's side: a read-only mapping of the control segment and of the registry
// segments of the pools its caller may read, validated once (magic, version, ready state,
// sizes, every offset and length within its segment, each arena's header); after that only
// const access, with atomic loads where the daemon writes while we read.
class ControlReader {
 public:
  ControlReader() = default;
  // Takes the mapping of a control segment received from kvpoold. kProtocolError when it is
  // not a kvpool control segment or a part lies outside it, kVersionMismatch for another
  // layout major, kDaemonGone when the daemon is not (or no longer) ready.
  static Result<ControlReader> open(Segment segment);
  // The graded open that open() and adoption share; see GradedControl.
  static GradedControl open_graded(Segment segment, ControlOpener opener);
  // Takes pool i's registry segment (received with the control segment), validated.
  Status add_registry(uint32_t i, Segment segment);

  bool valid() const { return header_ != nullptr; }
  const ControlHeader& header() const { return *header_; }
  uint32_t max_clients() const { return header_->max_clients; }
  uint32_t num_pools() const { return header_->num_pools; }
  // DaemonState, loaded with acquire.
  DaemonState state() const;
  // Pool i's name and layout (every pool's: the control segment lists them all).
  const PoolInfo& pool_info(uint32_t i) const { return infos_[i]; }
  std::span<const PoolInfo> pool_infos() const { return {infos_, header_->num_pools}; }
  // Whether this caller was given pool i's registry segment (its allow-lists admit it).
  bool has_pool(uint32_t i) const { return i < registries_.size() && registries_[i].valid(); }
  const RegistryReader& registry(uint32_t i) const { return registries_[i]; }
  // Pool i's arena (has_pool(i) only): counters, holdings, the one seqlock snapshot.
  const pool::ArenaView& arena(uint32_t i) const { return registries_[i].arena(); }
  // Client slot i as this caller may see it: from the first registry segment it holds whose
  // mirror shows the slot in use; a free, zero slot when no pool it may read is the
  // client's (or it holds none).
  const SlotInfo& slot(uint32_t i) const;
  // Whether any pool this caller may read has an event ring.
  bool has_event_ring() const;
  // A reader of pool i's event ring (has_pool(i)), from its oldest record; kUnsupported
  // when there is none.
  Result<EventRingReader> event_ring(uint32_t i) const { return registries_[i].event_ring(); }
  // The request latency histogram, when the daemon writes one (layout minor >= 2).
  const LatencyHistogram* request_latency() const;
  // The daemon's epoch and what it adopted (layout 3.1); nullptr from a 3.0 daemon.
  const RestartInfo* restart() const;
  // The daemon's epoch; 0 from a daemon that does not publish one.
  uint64_t epoch() const { return restart() ? restart()->epoch : 0; }

 private:
  Segment segment_;
  const ControlHeader* header_ = nullptr;
  const PoolInfo* infos_ = nullptr;
  std::vector<RegistryReader> registries_;  // per pool; invalid where not given
};

// What ControlReader::open_graded found. Checks, in order: size and magic (kProtocolError
// "not a kvpool control segment"; `header` stays null), layout major (kVersionMismatch;
// for a successor also the minor and the header size, since it adopts only this build's
// layout), the state (a client's kStarting and kStopping stop here: their sizes are not
// to be trusted or needed), total_bytes and the pool table within the segment
// (kProtocolError), and for a successor, that the daemon that wrote it no longer runs
// (kInvalidState "a live daemon's"). `header` is set whenever the magic matched, refused or
// not, so a successor can still read which daemon a refused segment came from; `reader`
// (which then owns the mapping) is valid for kReady and kDead only.
struct GradedControl {
  ControlGrade grade = ControlGrade::kRefused;
  Status why;  // ok unless kRefused
  const ControlHeader* header = nullptr;
  ControlReader reader;
  Segment segment;  // the mapping, when `reader` does not hold it
};

}  // namespace kvpool::shm
