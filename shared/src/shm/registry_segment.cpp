#include "kvpool/shm/registry_segment.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "kvpool/core/paths.hpp"
#include "kvpool/shm/fields.hpp"

namespace kvpool::shm {
namespace {

static_assert(sizeof(RegistryHeader) % 64 == 0 && sizeof(SlotInfo) % 64 == 0);
constexpr uint64_t kRegionAlign = 4096;  // the arena and the ring: pages

Status outside(const std::string& what) {
  return Status(ErrorCode::kProtocolError, what + " lies outside the registry segment");
}

}  // namespace

Result<RegistryLayout> registry_layout(uint32_t max_clients, const pool::PoolCoreConfig& pool,
                                       uint32_t event_ring_slots) {
  RegistryLayout l;
  l.slots_offset = sizeof(RegistryHeader);
  uint64_t off = align_up(l.slots_offset + uint64_t{max_clients} * sizeof(SlotInfo), kRegionAlign);
  auto bytes = pool::PoolCore::arena_bytes(pool);
  if (!bytes) return Status(ErrorCode::kConfigError, bytes.status().message());
  l.arena_offset = off;
  l.arena_bytes = *bytes;
  off = align_up(off + *bytes, kRegionAlign);
  if (event_ring_slots != 0) {
    l.event_ring_offset = off;
    l.event_ring_bytes = event_ring_bytes(event_ring_slots);
  }
  l.disk_offset = align_up(off + l.event_ring_bytes, alignof(DiskTierInfo));
  l.total_bytes = align_up(l.disk_offset + sizeof(DiskTierInfo), kRegionAlign);
  return l;
}

Result<RegistryWriter> RegistryWriter::create(const std::string& instance, uint32_t pool,
                                              const std::string& name, uint32_t max_clients,
                                              const RegistryLayout& layout,
                                              uint32_t event_ring_slots) {
  auto seg = Segment::create_anonymous(control_segment_name(instance) + ".reg." + name,
                                       layout.total_bytes);
  if (!seg) return seg.status();
  RegistryWriter w;
  w.segment_ = std::move(seg.value());
  char* base = w.segment_.as<char>();
  // Plain stores: nobody has the segment yet, and readers trust none of it before the
  // control segment's kReady.
  auto* h = new (base) RegistryHeader{};
  h->magic = kRegistryMagic;
  h->layout_major = kLayoutMajor;
  h->layout_minor = kLayoutMinor;
  h->header_bytes = sizeof(RegistryHeader);
  h->pool = pool;
  h->max_clients = max_clients;
  h->slots_offset = layout.slots_offset;
  h->arena_offset = layout.arena_offset;
  h->arena_bytes = layout.arena_bytes;
  h->total_bytes = layout.total_bytes;
  std::memcpy(h->name, name.data(), std::min(name.size(), sizeof(h->name) - 1));
  new (base + layout.disk_offset) DiskTierInfo{};  // zero: no disk tier until one opens
  h->disk_offset = layout.disk_offset;
  h->disk_bytes = sizeof(DiskTierInfo);
  if (layout.event_ring_bytes != 0) {
    auto ring = EventRingWriter::create(base + layout.event_ring_offset, layout.event_ring_bytes,
                                        event_ring_slots);
    if (!ring)
      return Status(ErrorCode::kConfigError, "event_ring_slots: " + ring.status().message());
    w.event_ring_ = ring.value();
    h->event_ring_offset = layout.event_ring_offset;
    h->event_ring_bytes = layout.event_ring_bytes;
  }
  return w;
}

SlotInfo* RegistryWriter::slots() const {
  return reinterpret_cast<SlotInfo*>(segment_.as<char>() + header().slots_offset);
}

DiskTierInfo& RegistryWriter::disk_info() const {
  return *reinterpret_cast<DiskTierInfo*>(segment_.as<char>() + header().disk_offset);
}

Result<const RegistryHeader*> check_registry(const Segment& segment) {
  const uint64_t size = segment.size();
  const auto* h = segment.as<const RegistryHeader>();
  if (size < sizeof(RegistryHeader) || h->magic != kRegistryMagic)
    return Status(ErrorCode::kProtocolError, "not a kvpool registry segment");
  if (h->layout_major != kLayoutMajor || h->header_bytes < sizeof(RegistryHeader))
    return Status(ErrorCode::kVersionMismatch, "registry segment of shm layout " +
                                                   std::to_string(h->layout_major) +
                                                   ", this build " + std::to_string(kLayoutMajor));
  if (h->total_bytes > size)
    return Status(ErrorCode::kProtocolError,
                  "the registry segment is smaller than its header says");
  if (!within(h->slots_offset, uint64_t{h->max_clients} * sizeof(SlotInfo), size) ||
      h->slots_offset % alignof(SlotInfo) != 0)
    return outside("the slot table");
  if (!within(h->arena_offset, h->arena_bytes, size) || h->arena_offset % 64 != 0)
    return outside("the arena");
  if (h->event_ring_offset != 0 && (!within(h->event_ring_offset, h->event_ring_bytes, size) ||
                                    h->event_ring_offset % alignof(EventRingHeader) != 0))
    return outside("the event ring");
  if (h->disk_offset != 0 &&
      (h->disk_bytes < sizeof(DiskTierInfo) || !within(h->disk_offset, h->disk_bytes, size) ||
       h->disk_offset % alignof(DiskTierInfo) != 0))
    return outside("the disk tier section");
  return h;
}

Result<RegistryReader> RegistryReader::open(Segment segment, uint32_t pool, uint32_t max_clients) {
  auto checked = check_registry(segment);
  if (!checked) return checked.status();
  const RegistryHeader& h = **checked;
  if (h.pool != pool || h.max_clients != max_clients)
    return Status(ErrorCode::kProtocolError, "registry segment of pool " + std::to_string(h.pool) +
                                                 " (" + std::to_string(h.max_clients) +
                                                 " slots) where pool " + std::to_string(pool) +
                                                 " was expected");
  auto arena = pool::ArenaView::attach(segment.as<const char>() + h.arena_offset, h.arena_bytes,
                                       std::string(h.name, strnlen(h.name, kNameBytes)));
  if (!arena)
    return Status(arena.status().code(),
                  "pool " + std::to_string(pool) + " arena: " + arena.status().message());
  RegistryReader r;
  r.header_ = &h;
  r.slots_ = reinterpret_cast<const SlotInfo*>(segment.as<const char>() + h.slots_offset);
  r.arena_ = std::move(arena.value());
  r.segment_ = std::move(segment);  // the mapping stays where it is: the pointers hold
  return r;
}

Result<EventRingReader> RegistryReader::event_ring() const {
  if (!has_event_ring())
    return Status(ErrorCode::kUnsupported, "the daemon runs without an event ring");
  return EventRingReader::attach(segment_.as<const char>() + header_->event_ring_offset,
                                 header_->event_ring_bytes);
}

const DiskTierInfo* RegistryReader::disk_info() const {
  if (header_->disk_offset == 0) return nullptr;
  const auto* d =
      reinterpret_cast<const DiskTierInfo*>(segment_.as<const char>() + header_->disk_offset);
  return d->enabled != 0 ? d : nullptr;
}

}  // namespace kvpool::shm
