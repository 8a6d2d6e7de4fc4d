// A pool's registry segment, owned here: everything of one pool that only the clients
// allowed that pool may read (DESIGN §3, issue 27 item 1). The control segment, which every
// client and observer of the instance maps, keeps only what all of them may see (the
// daemon's state and global counters, each pool's name and layout); this segment, one per
// pool, is handed out only with that pool's allow-list check:
//
//   RegistryHeader (256 B) | SlotInfo[max_clients]   the clients that may use this pool
//   | arena (PoolCore state: blocks, hashes, holdings; 4 KiB aligned)
//   | event ring of this pool with its token area (when configured; 4 KiB aligned)
//   | DiskTierInfo (layout 4.1; 64 aligned): the pool's disk tier, zero when it has none
//
// The slot table is a mirror: the daemon writes a client's SlotInfo into the registry
// segment of every pool the client may use (Welcome::pool_mask) and leaves it free in the
// others, so a caller sees the clients that share a pool with it and nobody else.
//
// An unnamed memfd sealed against resizing, like every segment; readers get a read-only
// descriptor. Ordering: the daemon fills it completely before it publishes the control
// segment's kReady (release); a reader validates it only after loading that state with
// acquire (ControlReader), so plain fields are read plainly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "kvpool/core/status.hpp"
#include "kvpool/pool/arena_view.hpp"
#include "kvpool/pool/pool_core.hpp"
#include "kvpool/shm/disk_tier_info.hpp"
#include "kvpool/shm/event_ring.hpp"
#include "kvpool/shm/segment.hpp"
#include "kvpool/shm/segment_layout.hpp"
#include "kvpool/shm/unique_fd.hpp"

namespace kvpool::shm {

inline constexpr uint64_t kRegistryMagic = 0x4B56504F4F4C5247ull;  // "KVPOOLRG"

struct RegistryHeader {
  uint64_t magic;  // kRegistryMagic
  uint16_t layout_major;
  uint16_t layout_minor;
  uint32_t header_bytes;  // sizeof(RegistryHeader)
  // The epoch of the daemon that made it (RestartInfo::epoch): a restarted daemon pairs
  // stored registry segments with the stored control segment by it.
  uint64_t epoch;
  uint32_t pool;  // index in the control segment's pool table
  uint32_t max_clients;
  uint64_t slots_offset;
  uint64_t arena_offset;
  uint64_t arena_bytes;
  uint64_t event_ring_offset;  // 0 and 0: no event ring
  uint64_t event_ring_bytes;
  uint64_t total_bytes;
  char name[kNameBytes];  // the pool's name, NUL-terminated
  // Device pools: what opens the slab (a capability: it stays out of the control segment).
  uint8_t device_uuid[16];
  uint8_t ipc_handle[64];
  // Layout 4.1: where the pool's DiskTierInfo lies (disk_tier_info.hpp). 0 and 0 from a
  // 4.0 daemon, whose reserved bytes were zero.
  uint64_t disk_offset;
  uint64_t disk_bytes;
  uint8_t reserved[16];
};
static_assert(std::is_standard_layout_v<RegistryHeader> &&
              std::is_trivially_copyable_v<RegistryHeader>);
static_assert(offsetof(RegistryHeader, epoch) == 16 && offsetof(RegistryHeader, name) == 80);
static_assert(offsetof(RegistryHeader, ipc_handle) == 160);
static_assert(offsetof(RegistryHeader, disk_offset) == 224);
static_assert(sizeof(RegistryHeader) == 256);

// Where every part of a registry segment lies.
struct RegistryLayout {
  uint64_t slots_offset = 0;
  uint64_t arena_offset = 0;
  uint64_t arena_bytes = 0;
  uint64_t event_ring_offset = 0;  // 0 and 0: no event ring
  uint64_t event_ring_bytes = 0;
  uint64_t disk_offset = 0;  // DiskTierInfo, always placed (zero: no disk tier)
  uint64_t total_bytes = 0;
};
// The one computation of those offsets. kConfigError when the arena cannot be sized.
Result<RegistryLayout> registry_layout(uint32_t max_clients, const pool::PoolCoreConfig& pool,
                                       uint32_t event_ring_slots);

// kvpoold's side of one pool's registry segment.
class RegistryWriter {
 public:
  RegistryWriter() = default;
  // An unnamed, size-sealed memfd, mode 0600; fills the header and creates the event ring
  // when the layout has one (kConfigError "event_ring_slots: ...").
  static Result<RegistryWriter> create(const std::string& instance, uint32_t pool,
                                       const std::string& name, uint32_t max_clients,
                                       const RegistryLayout& layout, uint32_t event_ring_slots);

  RegistryHeader& header() const { return *segment_.as<RegistryHeader>(); }
  SlotInfo* slots() const;
  void* arena() const { return segment_.as<char>() + header().arena_offset; }
  size_t arena_bytes() const { return header().arena_bytes; }
  const EventRingWriter& event_ring() const { return event_ring_; }
  // The pool's disk tier section: the engine's DiskTier is its one writer.
  DiskTierInfo& disk_info() const;
  Result<UniqueFd> open_readonly_fd() const { return segment_.open_readonly_fd(); }

 private:
  Segment segment_;
  EventRingWriter event_ring_;
};

// Validates a registry segment's header, read-only: magic, layout major, size, every part
// within the segment. Does not look into the arena (the caller attaches it as it needs).
// kProtocolError naming the part that is wrong.
Result<const RegistryHeader*> check_registry(const Segment& segment);

// Everyone else's side: one pool's registry, read-only, validated once.
class RegistryReader {
 public:
  RegistryReader() = default;
  // `pool`: the index this segment must describe; `max_clients`: the control segment's.
  static Result<RegistryReader> open(Segment segment, uint32_t pool, uint32_t max_clients);

  bool valid() const { return header_ != nullptr; }
  const RegistryHeader& header() const { return *header_; }
  std::span<const SlotInfo> slots() const { return {slots_, header_->max_clients}; }
  const pool::ArenaView& arena() const { return arena_; }
  bool has_event_ring() const { return header_->event_ring_offset != 0; }
  // A reader of this pool's event ring, from its oldest record; kUnsupported when none.
  Result<EventRingReader> event_ring() const;
  // The pool's disk tier, or null when it has none (or the daemon is of layout 4.0).
  const DiskTierInfo* disk_info() const;

 private:
  Segment segment_;
  const RegistryHeader* header_ = nullptr;
  const SlotInfo* slots_ = nullptr;
  pool::ArenaView arena_;
};

}  // namespace kvpool::shm
